"""Where the build tool keeps what it learned per image ID: test results, scan reports, signing keys."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def state_home() -> Path:
    given = os.environ.get("LEARNERKIT_HOME")
    return Path(given) if given else Path.home() / ".local" / "share" / "learnerkit"


def id_file_name(image_id: str) -> str:
    return image_id.replace(":", "_")


PRIVATE_MODE = 0o600
PROJECT_FILE_MODE = 0o644
"""A file committed with the project (a lock, the size budgets): readable by everyone, as git checks it out."""


def write_atomic(path: Path, data: bytes, mode: int = PRIVATE_MODE) -> None:
    """Temp file + fsync + rename, so a reader never sees half a record; the file gets ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    Path(temp).replace(path)


def write_json(path: Path, payload: Any) -> None:
    write_atomic(path, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
