"""Atomic file writes (temp file in the same folder, fsync, rename, fsync the folder).

Everything the sidecar hands over (control files to the learner) or relies on after a restart (its
progress) is written this way: a reader sees the old content or the new, never half of it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, mode: int = 0o664) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        Path(temp).unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        Path(temp).replace(path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json_atomic(path: Path, value: Any) -> None:
    write_atomic(path, (json.dumps(value, sort_keys=True) + "\n").encode())


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None when it does not exist."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
