"""The house as the README and the packaging describe it: every top-level folder is listed, every package
folder is named as it is imported (`build/` alone excepted, as the README says)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def tracked_top_level_folders() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return {line.split("/", 1)[0] for line in listed.splitlines() if "/" in line}


def readme_folders() -> set[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([^`/]+)/` \|", text, flags=re.MULTILINE))


def test_the_readme_folder_table_lists_exactly_the_tracked_top_level_folders() -> None:
    assert readme_folders() == tracked_top_level_folders()


def package_roots() -> dict[str, str]:
    """setup.py's ``ROOTS``: each shipped package's import name -> its folder (setup.py finds those below)."""
    for node in ast.parse((REPO / "setup.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["ROOTS"]:
            roots = ast.literal_eval(node.value)
            assert isinstance(roots, dict)
            return roots
    raise AssertionError("setup.py has no ROOTS")


def test_every_package_folder_is_named_as_it_is_imported_except_build() -> None:
    renamed = {name: folder for name, folder in package_roots().items() if Path(folder).name != name}
    assert renamed == {"learnerkit_build": "build"}


def test_every_top_level_package_folder_ships_but_the_tests() -> None:
    """A new top-level package must be added to setup.py's ROOTS (the packages below a root ship by themselves:
    tests/integration/packaging/test_wheel.py)."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    top = {line.split("/")[0] for line in listed.splitlines() if line.count("/") == 1 and line.endswith("/__init__.py")}
    assert top - {"tests"} == {folder for folder in package_roots().values() if "/" not in folder}


def test_no_benchmark_imports_the_test_package() -> None:
    """A benchmark runs from a checkout without the tests' fixtures: what they share lives in the product or in
    a bench/ helper."""
    importers = []
    for script in sorted((REPO / "bench").glob("*.py")):
        tree = ast.parse(script.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            importers += [f"{script.name}: {name}" for name in names if name.split(".")[0] == "tests"]
    assert importers == []
