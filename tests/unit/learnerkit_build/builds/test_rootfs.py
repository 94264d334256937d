"""mmdebstrap's environment: fixed, but for libfaketime's variables, so a build run under `faketime` runs
mmdebstrap at the faked clock too (it logs the clock it reads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit_build.builds import rootfs
from learnerkit_build.builds.buildkit import LogSink


def test_mmdebstrap_inherits_the_faked_clock_and_nothing_else_of_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], _on_line: LogSink, _what: str, env: dict[str, str]) -> None:
        seen.append((argv, env))

    monkeypatch.setattr(rootfs, "_run", run)
    monkeypatch.setattr(rootfs, "mmdebstrap_exe", lambda: "/usr/bin/mmdebstrap")
    monkeypatch.setenv("LD_PRELOAD", "/usr/$LIB/faketime/libfaketime.so.1")
    monkeypatch.setenv("FAKETIME", "+30d")
    monkeypatch.setenv("HOME", "/root/elsewhere")
    (tmp_path / "rootfs").mkdir()
    rootfs.bootstrap(
        "bookworm", tmp_path / "rootfs", sources=["deb x ./"], variant="custom", include=[], epoch=1, on_line=print
    )
    [(argv, env)] = seen
    assert env["LD_PRELOAD"] == "/usr/$LIB/faketime/libfaketime.so.1"
    assert env["FAKETIME"] == "+30d"
    assert "HOME" not in env
    assert env["SOURCE_DATE_EPOCH"] == "1"
    assert rootfs.CLOCK_HOOK in argv
