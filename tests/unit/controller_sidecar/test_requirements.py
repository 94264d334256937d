"""requirements.txt: the refused lines, and real pip installing from an index served on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
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
    assert str(failed.value) == (
        "requirements.txt: no-such-package-here==9.9: no index or find-links offers a wheel of it for the learner's "
        "Python"
    )
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


LOCKED = {"torch": "2.13.0+cpu", "numpy": "2.4.6"}


def test_a_requirement_that_would_replace_a_locked_package_is_refused_naming_both_versions() -> None:
    with pytest.raises(RequirementError) as refused:
        check_requirements("lkgreet==1.0\ntorch==2.0.0\n", locked=LOCKED)
    assert "requirements.txt line 2: torch==2.0.0 would replace the image's locked torch 2.13.0+cpu" in str(
        refused.value
    )
    with pytest.raises(
        RequirementError, match=re.escape("line 1: NumPy<2 would replace the image's locked NumPy 2.4.6")
    ):
        check_requirements("NumPy<2\n", locked=LOCKED)


def test_a_requirement_the_locked_version_satisfies_is_kept() -> None:
    text = "torch==2.13.0\nnumpy>=2,<3\ntorch\nlkgreet==1.0\n"
    assert check_requirements(text, locked=LOCKED) == ("torch==2.13.0", "numpy>=2,<3", "torch", "lkgreet==1.0")


def test_the_constraints_file_pins_every_locked_package() -> None:
    assert PackageIndex(locked=LOCKED).constraints() == "numpy==2.4.6\ntorch==2.13.0+cpu\n"


def test_pip_gets_the_constraints_find_links_and_ca_bundle() -> None:
    index = PackageIndex("https://idx.local/simple", find_links=("https://w.local/links/",), ca_bundle="/ca.pem")
    joined = " ".join(pip_command(Path("/m/r.txt"), Path("/t"), index, constraints=Path("/c.txt")))
    for part in ("--constraint /c.txt", "--find-links https://w.local/links/", "--cert /ca.pem"):
        assert part in joined


def test_the_package_index_config_round_trips() -> None:
    index = PackageIndex(
        "https://idx.local/simple", ("https://b.local/simple",), ("b.local",), "3.11", ("/links",), "/ca.pem", LOCKED
    )
    assert PackageIndex.from_config(index.to_config()) == index


def _locked_dependency_index(tmp_path: Path) -> Iterator[str]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    dep = [build_wheel(wheels, "lkdep", v, {"lkdep.py": f"VERSION = {v!r}\n"}) for v in ("1.0", "2.0")]
    app = build_wheel(wheels, "lkapp", "1.0", {"lkapp.py": "import lkdep\n"}, requires=("lkdep",))
    clash = build_wheel(wheels, "lkclash", "1.0", {"lkclash.py": ""}, requires=("lkdep==2.0",))
    write_index(tmp_path / "index", [*dep, app, clash])
    with serve_index(tmp_path / "index") as url:
        yield url


locked_dependency_index = pytest.fixture(_locked_dependency_index)


def test_a_locked_dependency_is_held_to_its_version_and_left_to_the_image(
    tmp_path: Path, locked_dependency_index: str
) -> None:
    """lkapp needs lkdep; the image has lkdep 1.0 locked (the index's newest is 2.0): pip resolves lkdep==1.0,
    and only lkapp lands in /job/packages, so the learner imports the image's lkdep."""
    model, packages = tmp_path / "model", tmp_path / "job" / "packages"
    model.mkdir()
    (model / "requirements.txt").write_text("lkapp==1.0\n")
    index = PackageIndex(locked_dependency_index, locked={"lkdep": "1.0"})
    installed = asyncio.run(install_requirements(model, packages, index))
    assert [(p.name, p.version) for p in installed.packages] == [("lkapp", "1.0")]
    assert (packages / "lkapp.py").is_file()
    assert (packages / "lkapp-1.0.dist-info").is_dir()
    assert [p.name for p in packages.rglob("lkdep*")] == [], "the image's lkdep is imported, not a copy"
    unlocked = asyncio.run(install_requirements(model, packages, PackageIndex(locked_dependency_index)))
    assert [(p.name, p.version) for p in unlocked.packages] == [("lkapp", "1.0"), ("lkdep", "2.0")]


def test_a_dependency_that_conflicts_with_the_lock_fails_in_one_line_naming_both(
    tmp_path: Path, locked_dependency_index: str
) -> None:
    model, packages = tmp_path / "model", tmp_path / "job" / "packages"
    model.mkdir()
    (model / "requirements.txt").write_text("lkclash==1.0\n")
    index = PackageIndex(locked_dependency_index, locked={"lkdep": "1.0"})
    with pytest.raises(RequirementError) as failed:
        asyncio.run(install_requirements(model, packages, index))
    reason = str(failed.value)
    assert "\n" not in reason
    assert reason.startswith("requirements.txt: lkclash==1.0: conflicting requirements (")
    assert "lkclash 1.0 depends on lkdep==2.0" in reason
    assert "the image's locked lkdep==1.0" in reason


def test_an_index_that_refuses_connections_fails_in_one_line(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "requirements.txt").write_text("lkgreet==1.0\n")
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/simple"
        with pytest.raises(RequirementError) as failed:
            asyncio.run(install_requirements(model, tmp_path / "job" / "packages", PackageIndex(url)))
    reason = str(failed.value)
    assert "\n" not in reason
    assert reason.startswith(f"requirements.txt: lkgreet==1.0: cannot reach {url}/lkgreet/ (")
    assert "Connection refused" in reason


def test_the_sidecar_refuses_at_start_what_would_replace_the_lock_before_pip_runs(tmp_path: Path) -> None:
    """The archive lives in the tenant's bucket: a requirements.txt changed after submit is refused at start."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "requirements.txt").write_text("lkgreet==1.0\ntorch==2.0.0\n")
    index = PackageIndex("http://127.0.0.1:9/simple", locked=LOCKED)  # pip would fail otherwise: nothing listens
    with pytest.raises(RequirementError) as refused:
        asyncio.run(install_requirements(model, tmp_path / "job" / "packages", index))
    assert str(refused.value).startswith(
        "requirements.txt line 2: torch==2.0.0 would replace the image's locked torch 2.13.0+cpu"
    )
    assert not (tmp_path / "job").exists()
