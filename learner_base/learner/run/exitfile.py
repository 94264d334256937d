"""``$JOB_STATE_DIR/learner.exit``: how the command ended, for the sidecar. Written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import TypedDict

from learner.paths import BUDGET_NEXT_FILE, BUDGET_REACHED_FILE, BUDGET_WAIT_FILE, EXIT_FILE
from learner.run.errors import SetupError


class Reason(str, Enum):  # noqa: UP042 (StrEnum needs Python 3.11; images may run 3.10)
    """Why the command ended (or never started)."""

    COMPLETED = "completed"
    """Exit status 0, no halt requested."""
    FAILED = "failed"
    """Non-zero exit status (or the command could not be started), no halt requested."""
    HALTED = "halted"
    """A halt was requested and the command exited within the grace period."""
    HALT_TIMEOUT = "halt_timeout"
    """A halt was requested and the command was killed with SIGKILL after the grace period."""
    TERMINATED = "terminated"
    """learner-run itself got SIGTERM or SIGINT (``docker stop``) and passed it on."""
    KILLED = "killed"
    """The command died of a SIGKILL that learner-run did not send (the OOM killer, for one)."""
    START_TIMEOUT = "start_timeout"
    """``start`` did not appear within ``LEARNER_START_TIMEOUT``; the command never ran."""
    HALTED_BEFORE_START = "halted_before_start"
    """``halt`` appeared before ``start``; the command never ran."""


class RawExit(TypedDict):
    """The JSON object in ``learner.exit``."""

    exit_code: int
    signal: str | None
    reason: str
    finished_at: str
    started_at: str | None
    halt_requested: bool
    error: str | None


_UTC = timezone.utc  # noqa: UP017 (datetime.UTC needs Python 3.11)


def utc_now() -> datetime:
    return datetime.now(_UTC)


def iso(moment: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z``: ``2024-06-10T12:00:00.123456Z``."""
    return None if moment is None else moment.astimezone(_UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class ExitRecord:
    exit_code: int
    """Shell convention: the exit status, or 128+N when the command died of signal N."""
    reason: Reason
    signal: str | None = None
    """The name of the signal the command died of (``SIGKILL``), or None when it exited."""
    started_at: datetime | None = None
    """When the command was started; None when it never ran."""
    finished_at: datetime | None = None
    """When it ended; None means now, at serialisation."""
    halt_requested: bool = False
    error: str | None = None
    """learner-run's own error message, when it could not run the command."""

    def to_raw(self) -> RawExit:
        return RawExit(
            exit_code=self.exit_code,
            signal=self.signal,
            reason=self.reason.value,
            finished_at=iso(self.finished_at or utc_now()) or "",
            started_at=iso(self.started_at),
            halt_requested=self.halt_requested,
            error=self.error,
        )


def write_exit_file(state_dir: Path, record: ExitRecord) -> Path:
    """Write ``learner.exit`` atomically (temp file in the same directory, fsync, rename, fsync dir)."""
    target = state_dir / EXIT_FILE
    data = (json.dumps(record.to_raw(), indent=None, sort_keys=True) + "\n").encode()
    temp: str | None = None
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{EXIT_FILE}.", suffix=".tmp", dir=state_dir)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, 0o644)
            os.fsync(fd)
        finally:
            os.close(fd)
        Path(temp).replace(target)
        temp = None
        dir_fd = os.open(state_dir, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        raise SetupError(f"cannot write {target}: {e.strerror or e}") from e
    finally:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)
    return target


def remove_stale_exit_file(state_dir: Path) -> None:
    """Remove a ``learner.exit`` (and the budget's files) left by an earlier run of this container, so the
    files describe this run."""
    for name in (EXIT_FILE, BUDGET_REACHED_FILE, BUDGET_WAIT_FILE, BUDGET_NEXT_FILE):
        try:
            (state_dir / name).unlink(missing_ok=True)
        except OSError as e:
            raise SetupError(f"cannot remove stale {state_dir / name}: {e.strerror or e}") from e
