"""Copy every byte of the command's output to learner-run's stdout and to ``learner.log``.

A background thread reads the pipe in chunks (never lines: a 5 MB line costs no more than 5 MB of small
reads) and writes each chunk with unbuffered ``os.write``, so the sidecar tailing the log sees output as
soon as the command writes it. Bytes are never decoded. A failing destination is dropped with one warning;
the other keeps getting output, and the pipe keeps being drained so the command never blocks on it.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

CHUNK = 64 * 1024


def open_log(path: Path) -> int:
    """An append-only fd on ``path`` (created ``0666 & ~umask``)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class OutputPump:
    """Drain ``source_fd`` into each of ``sinks`` until end of file, on a daemon thread."""

    def __init__(self, source_fd: int, sinks: dict[str, int]) -> None:
        self._source = source_fd
        self._sinks = dict(sinks)
        self._thread = threading.Thread(target=self._run, name="learner-run-tee", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for end of file; True when the pump has finished."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            try:
                chunk = os.read(self._source, CHUNK)
            except OSError as e:
                _warn(f"reading the command's output failed: {e.strerror or e}")
                return
            if not chunk:
                return
            for name, fd in list(self._sinks.items()):
                try:
                    _write_all(fd, chunk)
                except OSError as e:
                    del self._sinks[name]
                    _warn(f"stopped copying output to {name}: {e.strerror or e}")


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"learner-run: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
