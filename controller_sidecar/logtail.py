"""Following an append-only file (``learner.log``, ``metrics.jsonl``) byte-exactly, and splitting it into lines.

:class:`FileTailer` returns every byte appended since its last call and survives what happens to log files:
the file not existing yet, truncation (the size drops below the offset: start again at 0), rotation (the
path names a new inode: the old open file is drained to its end first, then the new one is followed) and
huge appends (read in bounded chunks, and at most ``max_bytes`` per call when the caller asks). The file is
the learner's: it is opened without following links and must be a regular file (:mod:`controller_sidecar.jobfiles`);
a link or a FIFO in its place raises UnsafeFileError.

:class:`FileWakeup` says when to look again: at once when the file is made, renamed or removed (a watchdog
inotify observer, only a hint: events can be coalesced or lost), and otherwise on the reader's poll interval,
which is when what was appended is read, to EOF.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import BinaryIO

from watchdog.events import (
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import UnsafeFileError
from controller_sidecar.jobfiles import create_shared_file, open_regular

READ_CHUNK_BYTES = 1 << 20
"""One ``read`` call never asks for more than this, so a huge append is read in bounded pieces."""
WAKE_EVENTS: list[type[FileSystemEvent]] = [FileCreatedEvent, FileMovedEvent, FileDeletedEvent]
"""What wakes a reader: a file made, renamed or removed. The inotify watch asks the kernel for these only. Not
writes: a learner that logs every step (and appends to ``metrics.jsonl`` beside the log at every step) sent the
sidecar two events per step through watchdog's threads, about half the sidecar's CPU while training and a tenth
of the smoke learner's step rate (bench/sidecar.py); what is appended is read on the poll interval instead."""


class FileTailer:
    """Reads what was appended to ``path`` since the last call, starting at ``offset``.

    ``inode``: the inode ``offset`` belongs to (from a saved state); when the file now has another inode,
    the offset is meaningless and reading starts at 0.
    """

    def __init__(self, path: Path, offset: int = 0, *, inode: int | None = None) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.path = path
        self._offset = offset
        self._expected_inode = inode
        self._file: BinaryIO | None = None
        self._inode: int | None = None
        self.resets = 0
        """How often reading restarted at 0 (truncation or rotation): data before a reset may be gone."""

    @property
    def offset(self) -> int:
        """The position in the file followed now, just after the last byte returned."""
        return self._offset

    @property
    def inode(self) -> int | None:
        """The inode of the file followed now; None before the file first existed."""
        return self._inode

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def hold(self, *, create: bool = False) -> None:
        """Open the file now (``create``: make it first when missing), so what is written to it from now on is
        read even if its path is swapped for another file or a link before the first :meth:`read_new`."""
        if self._file is not None:
            return
        if create:
            create_shared_file(self.path)
        self._open()

    def read_new(self, max_bytes: int | None = None) -> bytes:
        """Every byte appended since the last call, or at most ``max_bytes`` of them (call again for the rest)."""
        budget = max_bytes if max_bytes is not None else -1
        out = bytearray()
        while budget != 0:
            try:
                handle = self._file or self._open()
            except UnsafeFileError:
                if out:
                    break  # the bytes of the file drained first are returned; the next call raises again
                raise
            if handle is None:
                break
            if os.fstat(handle.fileno()).st_size < self._offset:
                self._restart_at_zero(handle)
            want = READ_CHUNK_BYTES if budget < 0 else min(budget, READ_CHUNK_BYTES)
            data = handle.read(want)
            if data:
                out += data
                self._offset += len(data)
                if budget > 0:
                    budget -= len(data)
                continue
            if not self._replaced():
                break
            # Rotated: the old file is drained (we are at its EOF), so follow the new one from its start.
            self.close()
            self._offset = 0
            self.resets += 1
        return bytes(out)

    def _open(self) -> BinaryIO | None:
        try:
            handle = open_regular(self.path)
        except FileNotFoundError:
            return None
        inode = os.fstat(handle.fileno()).st_ino
        if self._expected_inode is not None and inode != self._expected_inode:
            self._offset = 0
            self.resets += 1
        self._expected_inode = None
        handle.seek(self._offset)
        self._file = handle
        self._inode = inode
        return handle

    def _restart_at_zero(self, handle: BinaryIO) -> None:
        handle.seek(0)
        self._offset = 0
        self.resets += 1

    def _replaced(self) -> bool:
        """True when ``path`` now names another file (or a link) than the one open; a missing path is no
        replacement yet."""
        try:
            return self.path.lstat().st_ino != self._inode
        except FileNotFoundError:
            return False


class LineSplitter:
    """Cuts a byte stream into lines, keeping each line's ``\\n``.

    A line whose content is longer than ``max_line_bytes`` comes out in pieces of ``max_line_bytes``; only
    the last piece ends with ``\\n``, so a record without ``\\n`` always continues in the next one and
    joining the records gives back the stream exactly.
    """

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        self.max_line_bytes = max_line_bytes
        self._tail = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines (and pieces of over-long lines) that ``data`` finishes."""
        if not data:
            return []
        limit = self.max_line_bytes
        parts = (self._tail + data).split(b"\n")
        tail = parts.pop()
        lines: list[bytes] = []
        for part in parts:
            if len(part) > limit:
                lines.extend(_pieces(part, limit))
                lines[-1] += b"\n"
            else:
                lines.append(part + b"\n")
        if len(tail) > limit:
            pieces = _pieces(tail, limit)
            tail = pieces.pop()  # 1 to max_line_bytes long: the next feed may still end this line
            lines.extend(pieces)
        self._tail = tail
        return lines

    def flush(self) -> list[bytes]:
        """The unterminated rest, if any (at the end of the stream)."""
        tail, self._tail = self._tail, b""
        return [tail] if tail else []


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


class _Handler(FileSystemEventHandler):
    def __init__(self, names: frozenset[str], wake: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
        self._names = names
        self._wake = wake
        self._loop = loop

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path, getattr(event, "dest_path", "")]
        if any(Path(os.fsdecode(path)).name in self._names for path in paths if path):
            # The observer runs in its own thread; the event belongs to the loop.
            with contextlib.suppress(RuntimeError):  # the loop closed while the observer stopped
                self._loop.call_soon_threadsafe(self._wake.set)


class FileWakeup:
    """Wakes a reader when files in one folder are made, renamed or removed (inotify through watchdog), and at least
    every poll interval.

    Use as an async context manager; ``await wait(timeout_s)`` returns on a hint or after the timeout.
    The folder must exist when the watch starts; when it does not, only the poll interval wakes the reader.
    """

    def __init__(self, paths: list[Path], *, clock: Clock = SYSTEM_CLOCK) -> None:
        folders = {path.parent for path in paths}
        if len(folders) != 1:
            raise ValueError(f"FileWakeup watches one folder; got {sorted(map(str, folders))}")
        self._folder = folders.pop()
        self._names = frozenset(path.name for path in paths)
        self._clock = clock
        self._wake = asyncio.Event()
        self._observer: BaseObserver | None = None

    async def __aenter__(self) -> FileWakeup:
        if self._folder.is_dir():
            observer = Observer()
            handler = _Handler(self._names, self._wake, asyncio.get_running_loop())
            observer.schedule(handler, str(self._folder), event_filter=WAKE_EVENTS)
            observer.start()
            self._observer = observer
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._observer is not None:
            self._observer.stop()
            await asyncio.to_thread(self._observer.join)
            self._observer = None

    async def wait(self, timeout_s: float) -> None:
        """Return when a watched file was made, renamed or removed since the last wait, or after ``timeout_s``."""
        if not self._wake.is_set():
            hint = asyncio.ensure_future(self._wake.wait())
            sleep = asyncio.ensure_future(self._clock.sleep(timeout_s))
            try:
                await asyncio.wait({hint, sleep}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                hint.cancel()
                sleep.cancel()
        self._wake.clear()
