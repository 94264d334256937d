"""requirements.txt: the refused lines, and real pip installing from an index served on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from controller_sidecar.errors import PermanentError
from controller_sidecar.provenancerecord import InstalledPackage
from controller_sidecar.requirements import (
    PackageIndex,
    RequirementError,
    check_requirements,
    install_requirements,
    pip_command,
)
from tests.pyindex import build_wheel, serve_index, write_index


def test_requirement_lines_are_kept_and_comments_dropped() -> None:
    text = "# tools\nlkgreet==1.0\n\nnumpy>=1.20,<3  # why\nrequests[socks] ~= 2.31 ; python_version >= '3.8'\n"
    wanted = check_requirements(text)
    assert wanted == ("lkgreet==1.0", "numpy>=1.20,<3", "requests[socks] ~= 2.31 ; python_version >= '3.8'")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("https://example.invalid/pkg-1.0.whl", "URLs are not allowed"),
        ("pkg @ https://example.invalid/pkg.zip", "URLs are not allowed"),
        ("git+ssh://git@example.invalid/x.git", "URLs are not allowed"),
        ("./vendor/pkg", "local paths are not allowed"),
        ("/tmp/pkg-1.0-py3-none-any.whl", "local paths are not allowed"),
        ("pkg-1.0-py3-none-any.whl", "local paths are not allowed"),
        ("--index-url http://elsewhere.invalid/simple", "pip options are not allowed"),
        ("-r other.txt", "pip options are not allowed"),
        ("-e .", "pip options are not allowed"),
        ("--find-links /tmp", "pip options are not allowed"),
        ("pkg===", "not a requirement"),
        # Issue 27 D9: pip reads a bare archive name as a local file, and option-like extras crash it.
        ("pkg.tgz", "local paths are not allowed"),
        ("pkg.tar", "local paths are not allowed"),
        ("PKG.ZIP", "local paths are not allowed"),
        ("pkg.tar.bz2", "local paths are not allowed"),
        ("Pkg.Tar.Xz>=1", "local paths are not allowed"),
        ("pkg.TBZ", "local paths are not allowed"),
        ("six[--index-url]", "not a requirement"),
        ("six[x] --index-url=elsewhere", "not a requirement"),
        ("pkg (>=1.0", "not a requirement"),
    ],
)
def test_lines_that_point_pip_elsewhere_are_refused_naming_the_line(line: str, why: str) -> None:
    with pytest.raises(RequirementError) as refused:
        check_requirements(f"ok==1.0\n{line}\n")
    assert f"requirements.txt line 2: {line!r}" in str(refused.value)
    assert why in str(refused.value)


def test_pep_508_requirements_with_markers_and_extras_are_kept() -> None:
    text = 'a.b-c_d[x,y]>=1.0,!=1.3.*; python_version < "4" and sys_platform == "linux"\nzope.interface==6\n'
    assert len(check_requirements(text)) == 2


def test_pip_runs_from_an_empty_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that pip could read as a file finds no file where pip runs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lkgreet").mkdir()
    seen: dict[str, list[str]] = {}

    async def fake_exec(*command: str, cwd: str | None = None, **_: object) -> object:
        seen["cwd"] = sorted(p.name for p in Path(cwd or ".").iterdir())
        seen["where"] = [str(cwd)]
        raise OSError("stop here")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", fake_exec)
    model = tmp_path / "model"
    model.mkdir()
    (model / "requirements.txt").write_text("lkgreet==1.0\n")
    with pytest.raises(OSError, match="stop here"):
        asyncio.run(install_requirements(model, tmp_path / "job" / "packages", PackageIndex("http://127.0.0.1:9/")))
    assert seen["cwd"] == []
    assert seen["where"] != [str(tmp_path)]


def test_pip_command_names_the_index_and_the_learners_python() -> None:
    index = PackageIndex("http://idx.local/simple", ("http://b.local/simple",), ("idx.local",), "3.11")
    command = pip_command(Path("/m/requirements.txt"), Path("/t"), index)
    assert command[:3] == [sys.executable, "-m", "pip"]
    joined = " ".join(command)
    for part in (
        "--only-binary=:all:",
        "--target /t",
        "--requirement /m/requirements.txt",
        "--python-version 3.11",
        "--index-url http://idx.local/simple",
        "--extra-index-url http://b.local/simple",
        "--trusted-host idx.local",
    ):
        assert part in joined


@pytest.fixture
def index_url(tmp_path: Path) -> object:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = build_wheel(wheels, "lkgreet", "1.0", {"lkgreet.py": "def hello():\n    return 'hello from lkgreet'\n"})
    write_index(tmp_path / "index", [wheel])
    with serve_index(tmp_path / "index") as url:
        yield url


def test_installs_into_the_packages_folder_importable_from_there(tmp_path: Path, index_url: str) -> None:
    model, packages = tmp_path / "model", tmp_path / "job" / "packages"
    model.mkdir()
    (model / "requirements.txt").write_text("lkgreet==1.0\n")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    installed = asyncio.run(install_requirements(model, packages, PackageIndex(index_url, python_version=version)))
    assert installed.requested == 1
    [wheel] = (tmp_path / "wheels").glob("lkgreet-*.whl")
    assert installed.packages == (InstalledPackage("lkgreet", "1.0", hashlib.sha256(wheel.read_bytes()).hexdigest()),)
    check = [sys.executable, "-c", "import lkgreet; print(lkgreet.hello(), lkgreet.__file__)"]
    done = subprocess.run(check, env={"PYTHONPATH": str(packages)}, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["hello", "from", "lkgreet", str(packages / "lkgreet.py")]
    assert [p.name for p in packages.parent.iterdir()] == ["packages"], "no staging folder is left"


def test_an_unknown_package_fails_with_pips_message_and_leaves_nothing(tmp_path: Path, index_url: str) -> None:
    model, packages = tmp_path / "model", tmp_path / "job" / "packages"
    model.mkdir()
    (model / "requirements.txt").write_text("lkgreet==1.0\nno-such-package-here==9.9\n")
    with pytest.raises(PermanentError) as failed:
        asyncio.run(install_requirements(model, packages, PackageIndex(index_url)))
    assert "pip could not install the requirements" in str(failed.value)
    assert "no-such-package-here" in str(failed.value)
    assert list(packages.parent.iterdir()) == []


def test_no_requirements_file_installs_nothing(tmp_path: Path) -> None:
    index = PackageIndex("http://127.0.0.1:9/simple")
    assert asyncio.run(install_requirements(tmp_path, tmp_path / "packages", index)).requested == 0
    assert not (tmp_path / "packages").exists()


def _children() -> set[int]:
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found


def test_a_halt_while_pip_waits_on_the_index_kills_pip_and_leaves_nothing(tmp_path: Path) -> None:
    model, packages = tmp_path / "model", tmp_path / "job" / "packages"
    model.mkdir()
    (model / "requirements.txt").write_text("lkgreet==1.0\n")
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        index = PackageIndex(f"http://127.0.0.1:{silent.getsockname()[1]}/simple")
        before = _children()

        async def halted() -> None:
            task = asyncio.create_task(install_requirements(model, packages, index))
            while not _children() - before:
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        asyncio.run(halted())
    assert _children() - before == set()
    assert list(packages.parent.iterdir()) == []
