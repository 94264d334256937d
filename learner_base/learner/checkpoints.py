"""Atomic, step-numbered checkpoint directories in ``$CHECKPOINT_DIR``.

A complete checkpoint is the entry ``ckpt-<step>`` with the step zero-padded to 10 digits
(``ckpt-0000000040``). It is written under a ``.tmp-`` name, fsynced, then renamed into place, so a reader
(the sidecar uploading, or a resumed job restoring) never sees a half-written one. Entries whose names start
with ``.tmp-`` are work in progress or leftovers of a crash, and are ignored.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from learner.paths import checkpoint_dir

TEMP_PREFIX = ".tmp-"
_NAME = re.compile(r"ckpt-(\d{10,})")


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: its step and the path of its directory."""

    step: int
    path: Path


def checkpoint_name(step: int) -> str:
    """The entry name of the checkpoint for ``step``: ``ckpt-0000000040``."""
    return f"ckpt-{step:010d}"


def _complete(directory: Path) -> list[Checkpoint]:
    """The complete checkpoints in ``directory``, oldest step first; none when it does not exist."""
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        match = _NAME.fullmatch(entry.name)
        if match:
            found.append(Checkpoint(step=int(match.group(1)), path=entry))
    return sorted(found, key=lambda c: c.step)


def latest_checkpoint() -> Checkpoint | None:
    """The complete checkpoint with the highest step in :func:`~learner.checkpoint_dir`, or None."""
    found = _complete(checkpoint_dir())
    return found[-1] if found else None


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsync every regular file and directory under ``root`` (symlinks are not followed)."""
    for current, _dirs, files in os.walk(root):
        for name in files:
            path = Path(current, name)
            if path.is_file() and not path.is_symlink():
                _fsync_path(path)
        _fsync_path(Path(current))


def _discard(path: Path, directory: Path) -> None:
    """Remove a checkpoint: first hide it under a temp name, so a half-deleted one never looks complete."""
    hidden = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}old-{path.name}-", dir=directory))
    path.rename(hidden / path.name)
    shutil.rmtree(hidden, ignore_errors=True)


@contextmanager
def new_checkpoint(step: int, keep: int = 3) -> Iterator[Path]:
    """Write the checkpoint for ``step``: yields an empty temporary directory to write files into.

    On normal exit the files and directory are fsynced and the directory is renamed to ``ckpt-<step>``
    (an existing checkpoint for the same step is replaced), then all but the newest ``keep`` complete
    checkpoints are deleted. On an exception the temporary directory is removed and the exception re-raised.

    >>> with new_checkpoint(step) as path:  # doctest: +SKIP
    ...     torch.save(model.state_dict(), path / "model.pt")
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an int >= 1, got {keep!r}")
    directory = checkpoint_dir()
    directory.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(step)
    temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{name}-", dir=directory))
    # mkdtemp makes 0700; the sidecar (another UID in group 0) must read checkpoints to upload them.
    temp.chmod(0o775)
    renamed = False
    try:
        yield temp
        _fsync_tree(temp)
        final = directory / name
        if final.exists() or final.is_symlink():
            _discard(final, directory)
        temp.rename(final)
        renamed = True
        _fsync_path(directory)
    finally:
        if not renamed:  # an exception, an interrupt (the halt's SIGINT) or an abandoned generator
            shutil.rmtree(temp, ignore_errors=True)
    for old in _complete(directory)[:-keep]:
        _discard(old.path, directory)
    _fsync_path(directory)
