"""Histories' columns kept on the scheduler's disk, so that a scheduler just started draws a long history's first
chart without parsing it again: parsing a million JSON lines takes tens of seconds on a loaded machine, loading
their columns a few milliseconds.

One file per learner's history (its name a hash of tenant, job and learner): a JSON header, then the columns as
raw little-endian float64 (as `History` holds them), mapped into memory when loaded (nothing is copied or parsed:
the thinning reads only the pages it needs). The header holds what the reader needs to go on (`ReadMark`) and the
stored history's version (a hash of its objects' keys, sizes and ETags, `FileStream.version`): the same version
is the same bytes, so the columns are used as they are; another is read on from the mark (the bytes up to it
hashed again, only those past it parsed; a rewritten history read whole). Written once a read has finished,
to a temporary file renamed into place; a file that cannot be read is dropped and the history read again.
Past `MAX_STORED_BYTES` the files least recently used go."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from learnerkit.scheduler.series.history import Column, History, HistoryReader, ReadMark, Series

MAX_STORED_BYTES = 4 << 30
MAGIC = b"learnerkit-series-1\n"


@dataclass(frozen=True)
class StoredHistory:
    reader: HistoryReader
    size: int
    version: str
    """The stored history's size and version when it was read."""


def default_folder() -> Path:
    """``LEARNERKIT_SERIES_CACHE``, else ``$XDG_CACHE_HOME/learnerkit/series`` (``~/.cache`` without it)."""
    chosen = os.environ.get("LEARNERKIT_SERIES_CACHE")
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "learnerkit" / "series"


def path_of(folder: Path, tenant: str, job_id: str, learner: int) -> Path:
    name = hashlib.sha256(f"{tenant}\0{job_id}\0{learner}".encode()).hexdigest()
    return folder / f"{name}.series"


def load(path: Path) -> StoredHistory | None:
    """The columns kept at ``path``; None when there are none or they cannot be read (the file is then removed)."""
    try:
        kept = _read(path)
        os.utime(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        path.unlink(missing_ok=True)
        return None
    return kept


def _read(path: Path) -> StoredHistory:
    with path.open("rb") as file:
        if file.read(len(MAGIC)) != MAGIC:
            raise ValueError("not a series file")
        size = int.from_bytes(file.read(8), "little")
        meta = json.loads(file.read(size))
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    arrays = [np.frombuffer(mapped, dtype="<f8", count=count, offset=offset) for offset, count in meta["arrays"]]
    series = {
        name: Series(name, Column(arrays[4 * i], arrays[4 * i + 1]), Column(arrays[4 * i + 2], arrays[4 * i + 3]))
        for i, name in enumerate(meta["names"])
    }
    mark = ReadMark(int(meta["offset"]), bytes.fromhex(meta["digest"]), bool(meta["open_line"]))
    return StoredHistory(HistoryReader(History(series), mark), int(meta["size"]), str(meta["version"]))


def save(path: Path, kept: StoredHistory, *, max_bytes: int = MAX_STORED_BYTES) -> None:
    """Keep ``kept`` at ``path`` (atomically), then remove the least recently used files past ``max_bytes``."""
    history, mark = kept.reader.history, kept.reader.mark
    columns = [
        array
        for series in history.series.values()
        for column in (series.by_step, series.by_time)
        for array in (column.x, column.y)
    ]
    meta: dict[str, object] = {
        "version": kept.version,
        "size": kept.size,
        "offset": mark.offset,
        "digest": mark.digest.hex(),
        "open_line": mark.open_line,
        "names": list(history.series),
    }
    # The header's length depends on the offsets it holds: room for them is reserved, then filled in.
    header_room = len(json.dumps(meta | {"arrays": [[1 << 60, len(a)] for a in columns]}).encode())
    start = _aligned(len(MAGIC) + 8 + header_room)
    offsets, at = [], start
    for array in columns:
        offsets.append([at, len(array)])
        at += 8 * len(array)
    header = json.dumps(meta | {"arrays": offsets}).encode().ljust(header_room)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("wb") as file:
            file.write(MAGIC + len(header).to_bytes(8, "little") + header)
            file.write(b"\0" * (start - file.tell()))
            for array in columns:
                file.write(np.ascontiguousarray(array, dtype="<f8").tobytes())
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
    _prune(path.parent, max_bytes, keep=path)


def _aligned(offset: int) -> int:
    return (offset + 7) // 8 * 8


def _prune(folder: Path, max_bytes: int, *, keep: Path) -> None:
    files = []
    for entry in os.scandir(folder):
        if entry.name.endswith(".series") and entry.is_file():
            stat = entry.stat()
            files.append((stat.st_mtime, stat.st_size, Path(entry.path)))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= max_bytes:
            break
        if path != keep:
            path.unlink(missing_ok=True)
            total -= size
