"""The lock cache's size cap: least recently used files go first, never one the current selection needs."""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import ConfigError
from learnerkit_build.lock.cache import cache_root
from learnerkit_build.state import read_json, write_json

CAP_VARIABLE = "LEARNERKIT_LOCK_CACHE_MB"
DEFAULT_CAP_MB = 20480
"""The whole matrix's locked files take about 9 GB; twice that leaves room for a lock update's new versions."""


@dataclass(frozen=True)
class PruneReport:
    removed: int
    freed: int
    """Bytes."""
    kept: int
    """Bytes left in the cache (more than the cap when what the selection needs is more)."""


def cap_bytes() -> int:
    """`LEARNERKIT_LOCK_CACHE_MB` in bytes (default 20480 MiB)."""
    raw = os.environ.get(CAP_VARIABLE, str(DEFAULT_CAP_MB))
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{CAP_VARIABLE}={raw!r}: a whole number of MiB (0 or more) is expected")
    return value * 1024 * 1024


USE_RESOLUTION_S = 3600


def used_path() -> Path:
    return cache_root().parent / "used.json"


def last_used() -> dict[str, float]:
    data = read_json(used_path())
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)} if isinstance(data, dict) else {}


def mark_used(sha256s: Collection[str]) -> None:
    """Record these entries as used now (to the hour: a build with nothing new writes nothing): the cap removes the
    files longest unused first. A record beside the cache, not the files' times: those key the remembered hashes
    (recipes.filehashes), which a touch would void."""
    now = round(time.time())
    used = last_used()
    if any(used.get(sha, 0) < now - USE_RESOLUTION_S for sha in sha256s):
        write_json(used_path(), {**used, **dict.fromkeys(sha256s, now)})


def prune(cap: int, keep: Collection[str]) -> PruneReport:
    """Remove the least recently used entries (`mark_used`, else the file's mtime) until the cache holds at most
    `cap` bytes; entries in `keep` (sha256s) stay whatever their age."""
    root = cache_root()
    used = last_used()
    entries = []
    for path in root.iterdir() if root.is_dir() else ():
        with suppress(FileNotFoundError):
            stat = path.stat()
            entries.append((used.get(path.name, stat.st_mtime), path.name, stat.st_size))
    total = sum(size for _, _, size in entries)
    removed = freed = 0
    for _, name, size in sorted(entries):
        if total <= cap:
            break
        if name in keep:
            continue
        with suppress(FileNotFoundError):
            (root / name).unlink()
            removed += 1
            freed += size
            total -= size
    if removed:
        write_json(used_path(), {sha: at for sha, at in used.items() if (root / sha).exists()})
    return PruneReport(removed=removed, freed=freed, kept=total)
