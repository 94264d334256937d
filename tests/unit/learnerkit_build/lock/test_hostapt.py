"""The private apt lists kept between runs, against a stand-in apt-get on PATH (no network): updated once, reused
while young, updated again when old or when they lack a locked version."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from learnerkit_build.lock import hostapt
from learnerkit_build.lock.model import LockedDeb

SHA = {name: f"{n:064x}" for n, name in enumerate(("libc6", "tini", "newer"), start=1)}
FAKE_APT = """#!/usr/bin/env python3
import os, sys
args = [a for a in sys.argv[1:] if a not in ("-qq", "-o") and "::" not in a]
state = os.environ["FAKE_APT_STATE"]
if args == ["update"]:
    with open(os.path.join(state, "updates"), "a") as log:
        log.write("update\\n")
    with open(os.path.join(state, "lists"), "w") as lists:
        lists.write(open(os.path.join(state, "mirror")).read())
    sys.exit(0)
lists = os.path.join(state, "lists")
listed = dict(line.split() for line in open(lists)) if os.path.exists(lists) else {}
wanted = [a for a in args if "=" in a]
if "--print-uris" in args:
    lacking = [want.split("=") for want in wanted if want not in listed]
    for name, version in lacking:
        print(f"E: Version '{version}' for '{name}' was not found", file=sys.stderr)
    if lacking:
        sys.exit(100)
    for want in wanted:
        name = want.split("=")[0]
        print(f"'http://deb.example/pool/{name}.deb' {name}.deb 10 SHA256:{listed[want]}")
"""


def deb(name: str) -> LockedDeb:
    return LockedDeb(name, "1.0", "amd64", f"{name}.deb", SHA[name], "image")


@pytest.fixture
def apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in's folder: `mirror` lists what the mirror offers, `updates` logs each update."""
    state = tmp_path / "apt"
    state.mkdir()
    (state / "mirror").write_text("libc6=1.0 " + SHA["libc6"] + "\ntini=1.0 " + SHA["tini"] + "\n", encoding="utf-8")
    exe = tmp_path / "bin" / "apt-get"
    exe.parent.mkdir()
    exe.write_text(FAKE_APT, encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_APT_STATE", str(state))
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path / "home"))
    return state


def updates(state: Path) -> int:
    log = state / "updates"
    return len(log.read_text(encoding="utf-8").splitlines()) if log.exists() else 0


SOURCES = ["deb http://deb.example/debian bookworm main"]


def test_the_lists_are_updated_once_and_kept_while_young(apt: Path) -> None:
    found, left = hostapt.deb_downloads([deb("libc6"), deb("tini")], SOURCES)
    assert [d.sha256 for d in found] == [SHA["libc6"], SHA["tini"]] and left == []
    assert updates(apt) == 1
    found, _ = hostapt.deb_downloads([deb("tini")], SOURCES)
    assert [d.url for d in found] == ["http://deb.example/pool/tini.deb"]
    assert updates(apt) == 1  # the kept lists answered


def test_old_lists_are_updated_again(apt: Path) -> None:
    hostapt.deb_downloads([deb("libc6")], SOURCES)
    stamp = next((Path(os.environ["LEARNERKIT_HOME"]) / hostapt.HOST_APT_DIR).iterdir()) / "updated"
    old = time.time() - hostapt.LISTS_MAX_AGE_S - 60
    os.utime(stamp, (old, old))
    hostapt.deb_downloads([deb("libc6")], SOURCES)
    assert updates(apt) == 2


def test_lists_lacking_a_locked_version_are_updated_once_then_it_is_left_to_the_image(apt: Path) -> None:
    hostapt.deb_downloads([deb("libc6")], SOURCES)
    found, left = hostapt.deb_downloads([deb("libc6"), deb("newer")], SOURCES)
    assert updates(apt) == 2  # young lists, but they lacked newer=1.0: updated once, not twice
    assert [d.sha256 for d in found] == [SHA["libc6"]] and left == [deb("newer")]  # the rest asked without it
    with (apt / "mirror").open("a", encoding="utf-8") as mirror:
        mirror.write(f"newer=1.0 {SHA['newer']}\n")
    found, left = hostapt.deb_downloads([deb("libc6"), deb("newer")], SOURCES)
    assert {d.sha256 for d in found} == {SHA["libc6"], SHA["newer"]} and left == []
    assert updates(apt) == 3
