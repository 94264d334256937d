"""The house as the README and the packaging describe it: every top-level folder is listed, every package
folder is named as it is imported (`build/` alone excepted, as the README says)."""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
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


def test_every_package_folder_is_named_as_it_is_imported_except_build() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    renamed = {name: folder for name, folder in setuptools["package-dir"].items() if Path(folder).name != name}
    assert renamed == {"learnerkit_build": "build"}
    for package in setuptools["packages"]:
        root, *rest = package.split(".")
        folder = Path(setuptools["package-dir"].get(root, root), *rest)
        assert (REPO / folder / "__init__.py").is_file(), f"{package} is not the folder {folder}"


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
