"""A service that dies while starting is named with how it died: a signal by its name, and what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from learnerkit.dev.detached import start_detached
from learnerkit.dev.errors import ServiceError
from learnerkit.dev.service import Launch, Service


def dying(code: str) -> Service:
    return Service(
        name="doomed",
        ports={"api": 1},
        main_port="api",
        argv=lambda launch: [sys.executable, "-c", f"import os, signal\nprint('restoring sweeps', flush=True)\n{code}"],
        probe=lambda launch: False,
        start_timeout_s=30,
    )


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", "was killed by SIGKILL, most likely by the kernel's out-of-memory"),
        ("os.kill(os.getpid(), signal.SIGTERM)", "was killed by SIGTERM (something outside it stopped it"),
        ("raise SystemExit(3)", "exited with 3 while starting"),
    ],
)
def test_a_service_that_dies_while_starting_says_how_in_one_line(code: str, said: str, tmp_path: Path) -> None:
    launch = Launch("doomed", tmp_path, {"api": 1})
    with pytest.raises(ServiceError) as failed:
        start_detached(dying(code), launch, tmp_path / "doomed.log")
    first, *rest = str(failed.value).splitlines()
    assert first.startswith("doomed ") and said in first, first
    # The log's path is left out: pytest numbers its folders (pytest-9) and would put "-9" there.
    how = first.replace(str(tmp_path), "")
    assert "-9" not in how and "-15" not in how and "restoring sweeps" in rest, first
