"""Supervise one training command: wait for ``start``, run it, pass on halts and signals, report its end.

Shutdown is designed first. A halt (the file ``$JOB_STATE_DIR/halt``) or learner-run's own SIGTERM/SIGINT
sends the halt signal to the command's whole process group, then SIGKILL after the grace period; a second
SIGTERM/SIGINT to learner-run sends SIGKILL at once. The main thread only polls (control files, signal
flags, the child's status) every ``poll_interval_s``; output is copied on a separate thread, so a stalled
stdout can never delay a halt. A halt file seen only after the command ended (it came within the last poll)
still makes the end a halt.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from types import FrameType

from learner.paths import HALT_FILE, START_FILE
from learner.run.errors import SetupError
from learner.run.exitfile import ExitRecord, Reason, remove_stale_exit_file, utc_now
from learner.run.scrub import scrub_env
from learner.run.settings import RunSettings
from learner.run.tee import OutputPump, open_log

LOG_FILE = "learner.log"
START_TIMEOUT_EXIT = 124
DRAIN_S = 0.5
"""After the command exits, how long its leftover background processes may keep the output pipe open."""
FINAL_DRAIN_S = 10.0
"""After SIGKILL to those leftovers, how long to wait for the last output to be copied."""


@dataclass
class StopSignals:
    """SIGTERM/SIGINT received by learner-run, recorded by the handler and acted on by the poll loop."""

    received: list[int] = field(default_factory=list)

    def install(self) -> StopSignals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)


class _Stop(Enum):
    HALT = "halt"
    TERMINATE = "terminate"


def signal_exit_code(signum: int) -> int:
    """The shell's status for a process that died of ``signum``."""
    return 128 + signum


def prepare_dirs(settings: RunSettings) -> None:
    for directory in (settings.state_dir, settings.log_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SetupError(f"cannot create {directory}: {e.strerror or e}") from e


def wait_for_start(settings: RunSettings, stop: StopSignals) -> ExitRecord | None:
    """Poll for ``start``; None when it appeared, else the record of why the command will not run."""
    start, halt = settings.state_dir / START_FILE, settings.state_dir / HALT_FILE
    deadline = None if settings.start_timeout_s is None else time.monotonic() + settings.start_timeout_s
    while True:
        if stop.received:
            return ExitRecord(signal_exit_code(stop.received[0]), Reason.TERMINATED)
        if halt.exists():
            return ExitRecord(0, Reason.HALTED_BEFORE_START, halt_requested=True)
        if start.exists():
            return None
        if deadline is not None and time.monotonic() >= deadline:
            return ExitRecord(
                START_TIMEOUT_EXIT,
                Reason.START_TIMEOUT,
                error=f"{start} did not appear within LEARNER_START_TIMEOUT={settings.start_timeout_s:g}s",
            )
        time.sleep(settings.poll_interval_s)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(pgid, signum)


def _launch_failure(settings: RunSettings, log_fd: int, e: OSError) -> ExitRecord:
    message = f"cannot run {settings.command[0]!r}: {e.strerror or e}"
    line = f"learner-run: {message}\n".encode()
    for fd in (log_fd, 2):
        with contextlib.suppress(OSError):
            os.write(fd, line)
    code = 127 if e.errno == errno.ENOENT else 126
    return ExitRecord(code, Reason.FAILED, error=message)


def run_command(settings: RunSettings, stop: StopSignals) -> ExitRecord:
    """Run the command to its end, teeing its output and passing on halts; the record of how it ended."""
    log_path = settings.log_dir / LOG_FILE
    try:
        log_fd = open_log(log_path)
    except OSError as e:
        raise SetupError(f"cannot open {log_path}: {e.strerror or e}") from e
    remove_stale_exit_file(settings.state_dir)
    env = scrub_env(os.environ, settings.scrub)
    read_fd, write_fd = os.pipe()
    started_at = utc_now()
    try:
        proc = subprocess.Popen(
            settings.command,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=settings.workdir if settings.workdir is not None and settings.workdir.is_dir() else None,
            start_new_session=True,
        )
    except OSError as e:
        os.close(read_fd)
        os.close(write_fd)
        record = _launch_failure(settings, log_fd, e)
        os.close(log_fd)
        return record
    os.close(write_fd)
    pump = OutputPump(read_fd, {"stdout": 1, str(log_path): log_fd})
    pump.start()

    cause: _Stop | None = None
    kill_at: float | None = None
    killed_by_us = False
    seen_signals = 0
    halt = settings.state_dir / HALT_FILE
    while proc.poll() is None:
        now = time.monotonic()
        new_signal = len(stop.received) > seen_signals
        seen_signals = len(stop.received)
        if cause is None and (new_signal or halt.exists()):
            cause = _Stop.TERMINATE if new_signal else _Stop.HALT
            _signal_group(proc.pid, settings.halt_signal)
            kill_at = now + settings.halt_grace_s
        elif new_signal and cause is _Stop.TERMINATE and not killed_by_us:
            kill_at = now  # a second SIGTERM/SIGINT: no more grace
        if kill_at is not None and now >= kill_at and not killed_by_us:
            _signal_group(proc.pid, signal.SIGKILL)
            killed_by_us = True
        time.sleep(settings.poll_interval_s)
    if cause is None and halt.exists():
        cause = _Stop.HALT  # asked for before the end was seen, within the last poll: the command never saw it

    if not pump.join(DRAIN_S):
        # Background processes of the command still hold the pipe; the command is over, so are they.
        _signal_group(proc.pid, signal.SIGKILL)
        if not pump.join(FINAL_DRAIN_S):
            _warn_stuck()
    if pump.join(0):
        os.close(read_fd)
        os.close(log_fd)
    return _record(proc.returncode, cause, killed_by_us, started_at)


def _record(returncode: int, cause: _Stop | None, killed_by_us: bool, started_at: datetime) -> ExitRecord:
    died_of = -returncode if returncode < 0 else None
    exit_code = returncode if died_of is None else signal_exit_code(died_of)
    signal_name = None if died_of is None else _signal_name(died_of)
    if cause is _Stop.TERMINATE:
        reason = Reason.TERMINATED
    elif cause is _Stop.HALT:
        reason = Reason.HALT_TIMEOUT if killed_by_us and died_of == signal.SIGKILL else Reason.HALTED
    elif died_of == signal.SIGKILL:
        reason = Reason.KILLED
    else:
        reason = Reason.COMPLETED if exit_code == 0 else Reason.FAILED
    return ExitRecord(
        exit_code,
        reason,
        signal=signal_name,
        started_at=started_at,
        halt_requested=cause is _Stop.HALT,
    )


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def _warn_stuck() -> None:
    with contextlib.suppress(OSError):
        os.write(2, b"learner-run: output pipe still open after the command ended; not waiting for it\n")
