"""Files written whole or not at all, readable by the other users of a pair (the sidecar, an evaluator).

``mkstemp`` makes a file only its owner can read; what is written here is read by other users, so the file
gets ``READABLE`` before it is renamed into place.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

READABLE = 0o644


@contextmanager
def replacing(path: Path, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed onto ``path`` when the block ends normally, removed
    when it does not (an exception, an interrupt such as the halt's SIGINT)."""
    fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=path.parent)
    os.close(fd)
    temp, renamed = Path(name), False
    try:
        yield temp
        temp.chmod(READABLE)
        temp.replace(path)
        renamed = True
    finally:
        if not renamed:
            temp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    """``path`` holds ``text`` (UTF-8), whole, synced to disk before it takes the name."""
    with replacing(path) as temp, temp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
