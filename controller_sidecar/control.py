"""The control files shared with ``learner-run`` and the ``learner`` helper (docs/learner-contract.md): ``start``,
``halt``, ``learner.exit``, and a sweep trial's ``budget.wait`` and ``budget.next`` (``promotion``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from controller_sidecar.atomicfile import write_atomic
from controller_sidecar.jobfiles import read_regular

START_FILE = "start"
HALT_FILE = "halt"
EXIT_FILE = "learner.exit"
BUDGET_WAIT_FILE = "budget.wait"
BUDGET_NEXT_FILE = "budget.next"


@dataclass(frozen=True)
class LearnerExit:
    """``learner.exit`` as learner-run wrote it."""

    exit_code: int
    reason: str
    """completed, failed, halted, halt_timeout, terminated, killed, start_timeout, halted_before_start."""
    signal: str | None = None
    halt_requested: bool = False
    error: str | None = None
    finished_at: str | None = None


def signal_start(control_dir: Path) -> None:
    """The data is ready: learner-run may run the command."""
    write_atomic(control_dir / START_FILE, b"")


def signal_halt(control_dir: Path) -> None:
    """Ask learner-run to send the halt signal to the command (it checkpoints and exits)."""
    write_atomic(control_dir / HALT_FILE, b"")


def start_signalled(control_dir: Path) -> bool:
    return (control_dir / START_FILE).exists()


def read_exit(control_dir: Path) -> LearnerExit | None:
    """The learner's exit record, or None while it runs. A malformed record reads as a failure; a link or
    special file in its place raises UnsafeFileError (it is not read)."""
    path = control_dir / EXIT_FILE
    try:
        raw = json.loads(read_regular(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return LearnerExit(exit_code=1, reason="failed", error=f"unreadable {path}: {e}")
    if not isinstance(raw, dict) or not isinstance(raw.get("exit_code"), int):
        return LearnerExit(exit_code=1, reason="failed", error=f"malformed {path}: {raw!r}")
    return LearnerExit(
        exit_code=raw["exit_code"],
        reason=str(raw.get("reason", "failed")),
        signal=raw.get("signal"),
        halt_requested=bool(raw.get("halt_requested", False)),
        error=raw.get("error"),
        finished_at=raw.get("finished_at"),
    )
