"""Where an object key or archive member may land: strictly inside its destination folder.

A name is refused when it is empty, absolute, has empty, ``.`` or ``..`` segments, a backslash or a NUL,
a segment longer than the file system allows (:data:`NAME_MAX` bytes), or when an existing component of its
path under the destination is a symlink (which could lead outside).
"""

from __future__ import annotations

from pathlib import Path

from controller_sidecar.errors import UnsafePathError

NAME_MAX = 255
"""Bytes in one file name (Linux, every common file system)."""


def relative_parts(name: str, *, what: str) -> tuple[str, ...]:
    """The path segments of ``name``; ``what`` names it in the error (``s3://b/k``, ``member x of y.zip``)."""
    if not name:
        raise UnsafePathError(f"{what}: empty name")
    if name.startswith("/"):
        raise UnsafePathError(f"{what}: absolute path {name!r}")
    if "\\" in name or "\x00" in name:
        raise UnsafePathError(f"{what}: backslash or NUL in {name!r}")
    parts = tuple(name.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise UnsafePathError(f"{what}: {name!r} has an empty, '.' or '..' segment")
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise UnsafePathError(f"{what}: the segment {part[:40]!r}... is longer than {NAME_MAX} bytes")
    return parts


def safe_destination(root: Path, name: str, *, what: str) -> Path:
    """``root/name`` after checking ``name`` and that no existing component below ``root`` is a symlink."""
    parts = relative_parts(name, what=what)
    current = root
    for part in parts:
        current = current / part
        if current.is_symlink():
            raise UnsafePathError(f"{what}: {name!r} leads through the symlink {current}")
    return current
