"""The generic manager of detached service processes: start one, tell whether it runs, stop it.

A started process gets its own session (``start_new_session``), no terminal, stdin from /dev/null and its
output appended to a log file, so it outlives the command that started it and ignores that shell's Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from learnerkit.dev.errors import ServiceError
from learnerkit.dev.polling import poll_until
from learnerkit.dev.process import is_alive, start_ticks
from learnerkit.dev.service import Launch, Service
from learnerkit.dev.state import ServiceRecord

KILL_WAIT_S = 10.0
LOG_TAIL_CHARS = 2000


def log_tail(path: Path, start: int = 0) -> str:
    """The end of the log at ``path`` from byte ``start`` on (one start's part of a log that every start appends to)."""
    try:
        with path.open("rb") as log:
            log.seek(start)
            text = log.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return text[-LOG_TAIL_CHARS:] or "(empty log)"


def exit_said(returncode: int) -> str:
    """How a process ended, in words; for a signal, which one and what to do."""
    if returncode >= 0:
        return f"exited with {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    if -returncode == signal.SIGKILL:
        return (
            f"was killed by {name}, most likely by the kernel's out-of-memory killer (`journalctl -k | grep -i oom` "
            "says; the log's last lines show what it was loading): free memory, or remove what it loads at start"
        )
    return f"was killed by {name} (something outside it stopped it: its log and the system's say what)"


def clean_env() -> dict[str, str]:
    """Only what the servers need: none of the caller's ETCD_* or AWS_* variables reach them."""
    return {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "TZ") if key in os.environ}


def start_detached(service: Service, launch: Launch, log: Path) -> ServiceRecord:
    """Start ``service`` detached and wait until its probe passes; on failure stop it and raise."""
    launch.folder.mkdir(parents=True, exist_ok=True)
    service.prepare(launch)
    argv = service.argv(launch)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=launch.folder,
            env={**clean_env(), **launch.settings},
            start_new_session=True,
        )
    record = ServiceRecord(
        name=service.name,
        pid=process.pid,
        start_ticks=start_ticks(process.pid),
        ports=dict(launch.ports),
        endpoint=service.endpoint(launch.ports),
        log=str(log),
        scrape_target=service.scrape_target(launch.ports),
        settings=dict(launch.settings),
    )
    ready = poll_until(lambda: process.poll() is not None or service.probe(launch), service.start_timeout_s, 0.1)
    if process.poll() is not None:
        raise ServiceError(
            f"{service.name} {exit_said(process.returncode)} while starting; {log} ends:\n{log_tail(log)}"
        )
    if not ready:
        stop_detached(record, service.stop_timeout_s)
        raise ServiceError(
            f"{service.name} did not answer at {record.endpoint} within {service.start_timeout_s:g}s; "
            f"{log} ends:\n{log_tail(log)}"
        )
    service.on_ready(launch)
    return record


def running(record: ServiceRecord) -> bool:
    """Whether the record's process still runs (False for a stale pid: gone, a zombie, or reused)."""
    return is_alive(record.pid, record.start_ticks)


def stop_detached(record: ServiceRecord, timeout_s: float) -> bool:
    """SIGTERM the service's process group, SIGKILL after ``timeout_s``; False when it was not running."""
    if not running(record):
        return False
    _signal_group(record.pid, signal.SIGTERM)
    if poll_until(lambda: not running(record), timeout_s):
        return True
    _signal_group(record.pid, signal.SIGKILL)
    if not poll_until(lambda: not running(record), KILL_WAIT_S):
        raise ServiceError(f"{record.name} (pid {record.pid}) survived SIGKILL for {KILL_WAIT_S:g}s")
    return True


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """The service leads its own session and group: signal the group, so helpers it forked go too."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
