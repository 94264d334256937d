"""Is the process a pid names still the one we started? (Linux ``/proc``; zombies count as gone.)

A pid alone is not enough: after a reboot or a crash the number may belong to another program. The state
file therefore records the process's start time (``/proc/<pid>/stat`` field 22, in clock ticks since
boot), and a pid whose start time differs is *stale*.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    state: str
    """One letter: R, S, D, Z (zombie), T, ..."""
    start_ticks: int


def proc_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """The process's state and start time, or None when no process has this pid."""
    try:
        text = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(state=fields[0], start_ticks=int(fields[19]))


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    stat = proc_stat(pid, proc)
    return None if stat is None else stat.start_ticks


def is_alive(pid: int, expected_start: int | None, proc: Path = PROC) -> bool:
    """Whether ``pid`` runs and is the process that started at ``expected_start`` (None: any start)."""
    if not proc.is_dir():
        return _signal_zero(pid)
    stat = proc_stat(pid, proc)
    if stat is None or stat.state in {"Z", "X"}:
        return False
    return expected_start is None or stat.start_ticks == expected_start


def _signal_zero(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
