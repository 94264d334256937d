"""Atomic file writes: a temp file in the same folder, fsync, rename, fsync of the folder.

Everything the sidecar hands over (control files to the learner) or relies on after a restart (its
progress, resume records, the status queue, the log's shipped offset) is written this way: a reader, or a
restarted sidecar, sees the old content or the new, never half of it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from controller_sidecar.errors import UnsafeFileError
from controller_sidecar.jobfiles import read_regular

LOGGER = logging.getLogger(__name__)


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """``data`` at ``path``; the learner (another user of the same group) may read it, never change it.
    ``durable=False`` skips both fsyncs: the file still survives the process (not the host) dying."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temp = Path(temp_name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        temp.replace(path)
    finally:
        temp.unlink(missing_ok=True)  # only still there when something failed before the rename
    if durable:
        fsync_dir(path.parent)


def write_json_atomic(path: Path, document: Any) -> None:
    write_atomic(path, (json.dumps(document, sort_keys=True) + "\n").encode())


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None when it does not exist or is not a regular file (a planted link)."""
    try:
        return json.loads(read_regular(path))
    except FileNotFoundError:
        return None
    except UnsafeFileError as error:
        LOGGER.warning("ignoring %s", error)
        return None
