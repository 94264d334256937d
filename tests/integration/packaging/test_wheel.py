"""The wheel as a user gets it: built from the files a fresh clone has, installed by real pip into a fresh virtual
environment outside the checkout, then imported module by module and run from a folder far from the checkout.

The editable install the other tests use maps each package to its folder, so it hides a package the wheel leaves
out; only a real install shows one (six were missing once, issue 36).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGE_ROOTS = {
    "learnerkit": "learnerkit",
    "learnerkit_build": "build",
    "learner": "learner_base/learner",
    "controller_sidecar": "controller_sidecar",
}
"""Import name -> source folder; setup.py finds the packages below these."""
NOT_SHIPPED = ("controller_sidecar/image/", "learnerkit/scheduler/console/frontend/")
"""The sidecar image's build context (`learnerkit sidecar build` reads it from the project folder), and the
console's npm lock and install (`scripts/frontend.sh` copies what the pages load into `static/vendor/`, which ships)."""
BUILD_FILES = ["pyproject.toml", "setup.py", "setup.cfg", "README.md", *PACKAGE_ROOTS.values()]

IMPORT_EVERY_MODULE = """
# Every module the installed distribution's RECORD lists, but the __main__ ones: importing one runs its program.
import importlib, importlib.metadata, json, sys
failed, imported = {}, []
for file in importlib.metadata.files("learnerkit"):
    if file.suffix == ".py" and file.stem != "__main__" and ".dist-info" not in str(file):
        name = ".".join(file.with_suffix("").parts).removesuffix(".__init__")
        try:
            imported.append((name, importlib.import_module(name).__file__))
        except Exception as e:
            failed[name] = f"{type(e).__name__}: {e}"
print(json.dumps({"imported": imported, "failed": failed}))
"""


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    outside: Path
    """A folder with no project in it or above it: the commands run there."""

    def run(self, *argv: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "LEARNERKIT_ROOT"}}
        env |= {"COLUMNS": "120", **extra_env}
        return subprocess.run(
            [str(self.venv / "bin" / argv[0]), *argv[1:]],
            cwd=self.outside,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def _fresh_clone_files(target: Path) -> None:
    """The files a wheel is built from, as a clone has them: tracked or new, not ignored (no stale build folder,
    no bytecode, no egg-info)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *BUILD_FILES],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes((REPO / name).read_bytes())


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    assert not base.is_relative_to(REPO), "the install must be outside the checkout"
    source, dist, outside = base / "clone", base / "dist", base / "elsewhere"
    for folder in (source, dist, outside):
        folder.mkdir()
    _fresh_clone_files(source)
    started = time.monotonic()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dist), str(source)], check=True)
    built = time.monotonic()
    (wheel,) = dist.glob("learnerkit-*.whl")
    venv.create(base / "venv", with_pip=True)
    subprocess.run(
        [
            base / "venv" / "bin" / "python",
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-compile",
            wheel,
        ],
        cwd=outside,
        check=True,
    )
    print(f"wheel built in {built - started:.1f} s, installed in {time.monotonic() - built:.1f} s")
    yield Installed(wheel, base / "venv", outside)


def test_the_wheel_ships_every_source_file_and_template(installed: Installed) -> None:
    """Every package folder (a sub-package added later too) and every file the code reads beside its modules
    (templates, py.typed) is in the wheel, under its import name."""
    expected = set()
    for name, folder in PACKAGE_ROOTS.items():
        for path in (REPO / folder).rglob("*"):
            relative = path.relative_to(REPO / folder).as_posix()
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and not f"{folder}/{relative}".startswith(NOT_SHIPPED)
            ):
                expected.add(f"{name}/{relative}")
    with zipfile.ZipFile(installed.wheel) as wheel:
        shipped = {n for n in wheel.namelist() if ".dist-info/" not in n}
    assert sorted(expected - shipped) == []
    assert sorted(shipped - expected) == []


def test_every_installed_module_imports_from_the_install(installed: Installed) -> None:
    result = installed.run("python", "-c", IMPORT_EVERY_MODULE)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["failed"] == {}
    names = [name for name, _ in report["imported"]]
    assert "learnerkit.scheduler.sweeps" in names and "learnerkit_build.lock" in names
    site = str(installed.venv)
    assert [(name, file) for name, file in report["imported"] if not file.startswith(site)] == []


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("scheduler", "serve", "--help"), ("sweep", "--help")],
    ids=["learnerkit", "scheduler-serve", "sweep"],
)
def test_the_cli_answers_from_outside_the_checkout(installed: Installed, argv: tuple[str, ...]) -> None:
    result = installed.run("learnerkit", *argv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: learnerkit")


@pytest.mark.parametrize(
    "argv",
    [
        ("image", "build", "pytorch:2.13-cpu"),
        ("framework", "new", "myframe"),
        ("sweep", "validate", "search.yml"),
    ],
    ids=["image-build", "framework-new", "sweep-validate"],
)
def test_commands_that_need_a_project_say_so(installed: Installed, argv: tuple[str, ...]) -> None:
    """Building images reads `frameworks/` and `learner_base/` from a project folder, which a wheel does not
    carry: the command says where it looked and how to name one, and leaves no traceback."""
    (installed.outside / "search.yml").write_text("manifest: manifest.yml\n", encoding="utf-8")
    result = installed.run("learnerkit", *argv)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no learnerkit project found" in result.stderr
    assert "--root or set $LEARNERKIT_ROOT" in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stderr


def test_the_scheduler_names_the_project_folder_it_needs(installed: Installed) -> None:
    """`scheduler serve` runs from the install but reads the image matrix from a project's `frameworks/`: with a
    signing key and no project, it stops there, saying so (docs: README, "Installing without the checkout")."""
    key = {"LEARNERKIT_SIGNING_KEY": str(installed.outside / "signing-key.pem")}
    created = installed.run("learnerkit", "scheduler", "key", "create", **key)
    assert created.returncode == 0, created.stderr
    result = installed.run("learnerkit", "scheduler", "serve", **key)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no learnerkit project found" in result.stderr
    assert "Traceback" not in result.stderr
