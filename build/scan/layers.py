"""The layer index of an image from `docker save`: every file per layer, whiteouts applied, config, history.

Both `docker save` layouts (legacy `<id>/layer.tar` and OCI `blobs/sha256/...`) carry `manifest.json`, which
names the config and the layer files in order. One pass reads each layer once: each regular file below the
size limit is handed to a visitor (the secret scanner) and kept when a later check wants its content.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from learnerkit_build.errors import BuildToolError

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_CONTENT_BYTES = 1 << 20
"""Files above this size are indexed but not read (secrets in large or binary files are out of scope)."""


class ImageArchiveError(BuildToolError):
    """A `docker save` archive cannot be read."""


@dataclass(frozen=True)
class FileEntry:
    path: str
    """Absolute and normalised, e.g. /etc/passwd."""
    layer: int
    kind: str
    """file, dir, symlink, hardlink or other."""
    mode: int
    """Permission bits, setuid/setgid/sticky included."""
    uid: int
    gid: int
    size: int
    linkname: str = ""


@dataclass
class Layer:
    index: int
    diff_id: str
    history: str | None
    """The `created_by` of the history entry that made this layer."""
    entries: list[FileEntry] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


@dataclass
class ImageIndex:
    reference: str
    config: dict[str, Any]
    layers: list[Layer]
    files: dict[str, FileEntry]
    """The final file system: the last layer's entry of each path that no later layer deleted."""
    contents: dict[str, bytes]
    """Contents, in the final file system, of the paths `wanted` selected."""
    config_digest: str = ""
    """sha256 of the config as stored: the image ID."""

    @property
    def container_config(self) -> dict[str, Any]:
        return dict(self.config.get("config") or {})

    def history_of(self, layer: int | None) -> str | None:
        return None if layer is None else self.layers[layer].history

    def text(self, path: str) -> str | None:
        data = self.contents.get(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def resolve(self, path: str) -> str:
        """`path` with symlinked top-level folders followed (usrmerge: /bin -> /usr/bin)."""
        head, _, rest = path.lstrip("/").partition("/")
        entry = self.files.get("/" + head)
        if entry is not None and entry.kind == "symlink" and rest:
            target = posixpath.normpath(posixpath.join("/", entry.linkname))
            return f"{target}/{rest}"
        return path


ContentVisitor = Callable[[FileEntry, bytes], None]
Wanted = Callable[[str], bool]


def _kind(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "other"


def _history_by_layer(config: dict[str, Any], count: int) -> list[str | None]:
    lines = [str(h.get("created_by", "")) for h in config.get("history", []) if not h.get("empty_layer", False)]
    return [lines[i] if i < len(lines) else None for i in range(count)]


def _norm(name: str) -> str:
    return posixpath.normpath("/" + name.lstrip("./").lstrip("/")) if name not in (".", "./") else "/"


def index_archive(archive: Path, reference: str, *, wanted: Wanted, visit: ContentVisitor | None = None) -> ImageIndex:
    """Index a `docker save` tar of one image."""
    try:
        with tarfile.open(archive, "r:*") as outer:
            manifest = json.loads(_read_member(outer, "manifest.json", archive))
            if not manifest:
                raise ImageArchiveError(f"{archive}: manifest.json names no image")
            config_raw = _read_member(outer, manifest[0]["Config"], archive)
            config = json.loads(config_raw)
            names = list(manifest[0]["Layers"])
            diff_ids = list(config.get("rootfs", {}).get("diff_ids", []))
            histories = _history_by_layer(config, len(names))
            files: dict[str, FileEntry] = {}
            contents: dict[str, bytes] = {}
            layers = []
            for number, name in enumerate(names):
                layer = Layer(number, diff_ids[number] if number < len(diff_ids) else "", histories[number])
                handle = outer.extractfile(name)
                if handle is None:
                    raise ImageArchiveError(f"{archive}: layer {name} is not a file")
                _index_layer(handle, layer, files, contents, wanted, visit)
                layers.append(layer)
    except (tarfile.TarError, OSError, KeyError, json.JSONDecodeError) as e:
        raise ImageArchiveError(f"{archive}: not a readable `docker save` archive of {reference}: {e}") from e
    digest = "sha256:" + hashlib.sha256(config_raw).hexdigest()
    return ImageIndex(reference, config, layers, files, contents, digest)


def _read_member(outer: tarfile.TarFile, name: str, archive: Path) -> bytes:
    handle = outer.extractfile(name)
    if handle is None:
        raise ImageArchiveError(f"{archive}: {name} is missing")
    return handle.read()


def _index_layer(
    handle: IO[bytes],
    layer: Layer,
    files: dict[str, FileEntry],
    contents: dict[str, bytes],
    wanted: Wanted,
    visit: ContentVisitor | None,
) -> None:
    added: dict[str, FileEntry] = {}
    added_contents: dict[str, bytes] = {}
    deleted: set[str] = set()
    opaque: set[str] = set()
    with tarfile.open(fileobj=handle, mode="r|*") as inner:
        for member in inner:
            path = _norm(member.name)
            base = posixpath.basename(path)
            parent = posixpath.dirname(path)
            if base == OPAQUE:
                opaque.add(parent)
                continue
            if base.startswith(WHITEOUT):
                deleted.add(posixpath.join(parent, base[len(WHITEOUT) :]))
                continue
            entry = FileEntry(
                path=path,
                layer=layer.index,
                kind=_kind(member),
                mode=stat.S_IMODE(member.mode),
                uid=member.uid,
                gid=member.gid,
                size=member.size,
                linkname=member.linkname,
            )
            added[path] = entry
            layer.entries.append(entry)
            if member.isreg() and member.size <= MAX_CONTENT_BYTES and (visit is not None or wanted(path)):
                data = inner.extractfile(member)
                body = data.read() if data is not None else b""
                if visit is not None:
                    visit(entry, body)
                if wanted(path):
                    added_contents[path] = body
    layer.deleted = sorted(deleted | {d + "/*" for d in opaque})
    if deleted or opaque:
        for path in [p for p in files if _removed(p, deleted, opaque)]:
            del files[path]
            contents.pop(path, None)
    for path in added:
        contents.pop(path, None)
    files.update(added)
    contents.update(added_contents)


def _removed(path: str, deleted: set[str], opaque: set[str]) -> bool:
    """Whether a whiteout of this layer deletes `path` (itself, or one of its ancestors)."""
    if path in deleted:
        return True
    current = path
    while current not in ("/", ""):
        current = posixpath.dirname(current)
        if current in deleted or current in opaque:
            return True
    return False
