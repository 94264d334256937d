"""Whether the learner's end came with ``/job`` full: its failure then says so (ENOSPC is why it failed)."""

from __future__ import annotations

import os

FULL_BELOW_BYTES = 1 << 20
"""Less free space than this for the learner reads as full: its last write failed for want of a few blocks."""


def full_note(job_dir: os.PathLike[str] | str) -> str | None:
    """``/job is full (storage 64 MiB)`` when the learner can write nothing more to ``job_dir``; None otherwise
    (or when it cannot be read). The size is the file system's, a little below the manifest's ``storage``."""
    try:
        stats = os.statvfs(job_dir)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize >= FULL_BELOW_BYTES and (stats.f_files == 0 or stats.f_favail > 0):
        return None
    return f"{os.fspath(job_dir)} is full (storage {_size(stats.f_blocks * stats.f_frsize)})"


def _size(size: int) -> str:
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024:
            return f"{round(amount, 1):g} {unit}"
        amount /= 1024
    return f"{round(amount, 1):g} TiB"
