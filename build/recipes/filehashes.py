"""Files' sha256, remembered across runs by what `stat` says of each file, so a build with nothing changed
reads no file whole (a no-op `image build` hashed 139 files, the find-links wheels and the lock cache's among
them, 0.48 s, on every run).

A file's hash is remembered under its resolved path with its size, mtime, ctime and inode; any change to the
file moves its ctime (which no user can set back), so a remembered hash is that of the bytes there now. A
file changed in the last seconds before it was hashed is not remembered: a write in the same clock tick
would leave its times as they were. The memory is one JSON file in the project's `.learnerkit/`, written
atomically; a missing or unreadable one is an empty memory.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from learnerkit_build.state import write_atomic

MEMORY_FILE = Path(".learnerkit") / "cache" / "file-hashes.json"
"""Under the project root."""
SCHEME = "learnerkit-file-hashes/1"
SETTLED_S = 2.0
"""A file whose ctime is this recent is hashed every time and not remembered."""
MAX_ENTRIES = 50_000
"""Beyond this, only the files of the last run are kept."""

Key = tuple[int, int, int, int]
"""(size, mtime_ns, ctime_ns, inode)."""


class FileHashes:
    """sha256 of files by path: within a process always, across processes once `remembering` loads and saves."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Key, str]] = {}
        self._used: set[str] = set()
        self._changed = False
        self._guard = threading.Lock()
        """Builds run in threads at once (builds.schedule): one writer of the table at a time."""

    def sha256(self, path: Path) -> str:
        resolved = path.resolve()
        stat = resolved.stat()
        key: Key = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
        name = str(resolved)
        with self._guard:
            self._used.add(name)
        known = self._known.get(name)
        if known is not None and known[0] == key:
            return known[1]
        digest = _hash_file(resolved)
        if time.time() - stat.st_ctime_ns / 1e9 >= SETTLED_S:
            with self._guard:
                self._known[name] = (key, digest)
                self._changed = True
        return digest

    def load(self, file: Path) -> None:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or data.get("scheme") != SCHEME or not isinstance(data.get("files"), dict):
            return
        with self._guard:
            for name, entry in data["files"].items():
                if name not in self._known and _valid(entry):
                    self._known[name] = ((entry[0], entry[1], entry[2], entry[3]), entry[4])

    def save(self, file: Path) -> None:
        with self._guard:
            if not self._changed:
                return
            known = dict(self._known)
            used = set(self._used)
            self._changed = False
        if len(known) > MAX_ENTRIES:
            known = {name: entry for name, entry in known.items() if name in used}
        files = {name: [*key, digest] for name, (key, digest) in sorted(known.items())}
        write_atomic(file, json.dumps({"scheme": SCHEME, "files": files}).encode())


def _valid(entry: object) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 5
        and all(isinstance(n, int) for n in entry[:4])
        and isinstance(entry[4], str)
        and len(entry[4]) == 64
    )


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


HASHES = FileHashes()
"""The process's hashes (wheelhouses and locked files are shared by images)."""


@contextmanager
def remembering(root: Path) -> Iterator[None]:
    """Within the block, hashes are taken from and added to the project's memory, saved when the block ends
    (also when it raises: what was hashed is still true)."""
    file = root / MEMORY_FILE
    HASHES.load(file)
    try:
        yield
    finally:
        with suppress(OSError):  # a read-only checkout builds as before, hashing every time
            HASHES.save(file)


def file_sha256(path: Path) -> str:
    """The file's sha256; once per process for an unchanged file, once ever inside `remembering`."""
    return HASHES.sha256(path)
