"""The lock cache's size cap: least recently used files go first, never one the current selection needs."""

from __future__ import annotations

import os
from collections.abc import Collection
from contextlib import suppress
from dataclasses import dataclass

from learnerkit.common.errors import ConfigError
from learnerkit_build.lock.cache import cache_root, cached_path

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


def mark_used(sha256s: Collection[str]) -> None:
    """Date these entries now: the cap removes the files longest unused first."""
    for sha in sha256s:
        with suppress(FileNotFoundError):
            os.utime(cached_path(sha))


def prune(cap: int, keep: Collection[str]) -> PruneReport:
    """Remove the least recently used entries (by mtime: `mark_used`) until the cache holds at most `cap` bytes;
    entries in `keep` (sha256s) stay whatever their age."""
    root = cache_root()
    entries = []
    for path in root.iterdir() if root.is_dir() else ():
        with suppress(FileNotFoundError):
            stat = path.stat()
            entries.append((stat.st_mtime, path.name, stat.st_size))
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
    return PruneReport(removed=removed, freed=freed, kept=total)
