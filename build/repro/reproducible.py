"""Make a built image a function of its content: clamped file times and a canonical image config.

This engine (Debian's docker.io 20.10) has a BuildKit that knows no SOURCE_DATE_EPOCH: every file a RUN step
writes carries the build's clock, and the config records when each step ran. So after a locked build the image
is saved, every layer is rewritten with file times clamped to SOURCE_DATE_EPOCH (owners, modes, links, extended
attributes and order kept; atime/ctime and user/group names dropped), its config gets that date for `created`
and every history entry, and the result is loaded back. Two builds of the same inputs then have one image ID:
the config's sha256 over the same layer digests.

Nothing holds a whole archive: `docker save`'s stream is read member by member, each layer is clamped into a
temporary file as it arrives (its size and sha256 head its member) and streamed on into `docker load`, so the
extra disk is one clamped layer, whatever the image's size.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import tarfile
import tempfile
from collections.abc import Generator, Iterable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import docker.errors
import requests

from learnerkit.common import engine
from learnerkit_build.errors import BuildToolError
from learnerkit_build.repro.tarstream import BLOCK, TarWriter, chunk_file

CREATED_LABEL = "org.opencontainers.image.created"
_KEPT_PAX_PREFIX = "SCHILY.xattr."
"""The only pax records kept: extended attributes (file capabilities). Times and names are regenerated."""
_CHUNK = 1 << 20
_MAX_DOCUMENT = 64 << 20
"""A saved member that is not a layer (a config, manifest.json, a v1 `json`) is held in memory up to this size."""
_MAX_LINKS = 8


class ReproducibleError(BuildToolError):
    """An image could not be saved, rewritten or loaded back."""


def epoch_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalise_image(image: str, epoch: int) -> str:
    """Rewrite `image` (an ID) with clamped times and a canonical config; returns the new image ID."""
    archive = LoadArchive(epoch)
    with closing(engine.saved_image(image)) as saved:
        _load(rewritten_save(chunk_file(saved), archive, image), f"the normalised {image}")
    return _loaded(archive.image_id, f"the normalised {image}")


def load_archive(archive: Path, image_id: str) -> None:
    """`docker load` a rewritten archive, checking the engine holds it as `image_id` afterwards."""
    with archive.open("rb") as handle:
        _load(handle, f"{archive.name} ({image_id})")
    _loaded(image_id, archive.name)


def layer_archive(layer_tar: Path, dest: Path, config: dict[str, Any], epoch: int) -> str:
    """A `docker load` archive at `dest` of one layer (times clamped) under `config` made canonical: an image
    made without the engine (the base), so no import time or engine default reaches it; returns its ID."""
    archive = LoadArchive(epoch)

    def blocks(source: IO[bytes]) -> Iterator[bytes]:
        diff_id = yield from archive.layer(source)
        yield from archive.finish(config, [diff_id])

    with layer_tar.open("rb") as source, dest.open("wb") as out:
        out.writelines(blocks(source))
    return archive.image_id


class LoadArchive:
    """A `docker load` archive of clamped layers and a canonical config, block by block. Each layer is clamped
    into a temporary file (its size and sha256 head its member), written out and dropped; a layer whose clamped
    bytes were written already is named again, not written twice. `image_id` once `finish` has run."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._tar = TarWriter()
        self._written: set[str] = set()
        self._image_id: str | None = None

    @property
    def image_id(self) -> str:
        if self._image_id is None:
            raise ReproducibleError("the rewritten archive was not finished (its config is written last)")
        return self._image_id

    def layer(self, source: IO[bytes]) -> Generator[bytes, None, str]:
        """The member of the layer tar `source`, clamped; returns its diff ID."""
        with tempfile.TemporaryFile() as clamped:
            digest = clamp_layer(source, clamped, self.epoch)
            if digest not in self._written:
                size = clamped.seek(0, io.SEEK_END)
                clamped.seek(0)
                yield from self._tar.member(_layer_path(digest), size, iter(lambda: clamped.read(_CHUNK), b""))
                self._written.add(digest)
        return f"sha256:{digest}"

    def finish(self, config: dict[str, Any], diff_ids: list[str]) -> Iterator[bytes]:
        """The canonical config over `diff_ids` (the layers in image order), manifest.json and the archive's end."""
        raw = canonical_config(config, diff_ids, self.epoch)
        image_id = hashlib.sha256(raw).hexdigest()
        yield from self._tar.member(f"{image_id}.json", len(raw), [raw])
        layers = [_layer_path(diff_id.removeprefix("sha256:")) for diff_id in diff_ids]
        listing = json.dumps([{"Config": f"{image_id}.json", "RepoTags": None, "Layers": layers}]).encode()
        yield from self._tar.member("manifest.json", len(listing), [listing])
        yield self._tar.end()
        self._image_id = f"sha256:{image_id}"


def rewritten_save(saved: IO[bytes], archive: LoadArchive, source: str) -> Iterator[bytes]:
    """The `docker save` stream `saved` (of `source`, for messages) rewritten into `archive`, block by block.

    Members may come in any order (Docker 20.10 saves in lexical order: the config, the layer folders, then
    manifest.json, which alone says the layers' order), so each layer is written as it arrives and the config
    and manifest last. A layer saved twice is a link to the first (`layer.tar` symlinks, or hard links)."""
    try:
        diff_ids: dict[str, str] = {}
        links: dict[str, str] = {}
        documents: dict[str, bytes] = {}
        with tarfile.open(fileobj=saved, mode="r|") as outer:
            for member in outer:
                if member.issym() or member.islnk():
                    links[member.name] = _link_target(member)
                    continue
                handle = outer.extractfile(member) if member.isfile() else None
                if handle is None:
                    continue
                head = handle.read(BLOCK)
                if _is_tar(head):
                    diff_ids[member.name] = yield from archive.layer(chunk_file(_rejoined(head, handle)))
                else:
                    documents[member.name] = _document(source, member, head, handle)
        while saved.read(_CHUNK):
            pass  # tar's end records: the engine's save is over only once its response is read to the end
        config_name, layer_names = _manifest(source, documents)
        config = json.loads(_saved_member(source, documents, config_name, "config"))
        layers = [_saved_layer(source, name, diff_ids, links) for name in layer_names]
        yield from archive.finish(config, layers)
    except (OSError, tarfile.TarError, json.JSONDecodeError) as e:
        # Not an OSError any more: one raised while the HTTP client sends `docker load` its body would be
        # taken for a broken connection to the engine.
        raise ReproducibleError(f"rewriting the `docker save` archive of {source}: {e}") from e


def clamp_layer(source: IO[bytes], dest: IO[bytes], epoch: int) -> str:
    """Copy one layer tar into the seekable `dest` with times clamped; returns its sha256 (its diff ID)."""
    with (
        tarfile.open(fileobj=source, mode="r|") as layer,
        tarfile.open(fileobj=dest, mode="w", format=tarfile.PAX_FORMAT) as out,
    ):
        for member in layer:
            member.mtime = min(int(member.mtime), epoch)
            member.uname = member.gname = ""
            member.pax_headers = {k: v for k, v in member.pax_headers.items() if k.startswith(_KEPT_PAX_PREFIX)}
            out.addfile(member, layer.extractfile(member) if member.isfile() else None)
    dest.seek(0)
    digest = hashlib.sha256()
    for chunk in iter(lambda: dest.read(_CHUNK), b""):
        digest.update(chunk)
    return digest.hexdigest()


def canonical_config(config: dict[str, Any], diff_ids: list[str], epoch: int) -> bytes:
    """The config with every time set to `epoch` and the new layer digests, as sorted compact JSON."""
    when = epoch_time(epoch)
    config = {**config, "created": when, "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    config["history"] = [{**entry, "created": when} for entry in config.get("history", [])]
    inner = dict(config.get("config") or {})
    if CREATED_LABEL in (inner.get("Labels") or {}):
        inner["Labels"] = {**inner["Labels"], CREATED_LABEL: when}
    config["config"] = inner
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def _load(data: IO[bytes] | Iterable[bytes], what: str) -> None:
    try:
        engine.engine().images.load(data)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        raise ReproducibleError(f"loading {what}: {e}") from e


def _loaded(image_id: str, what: str) -> str:
    if engine.image_id(image_id) != image_id:
        raise ReproducibleError(f"the engine did not load {what} as {image_id}")
    return image_id


def _layer_path(digest: str) -> str:
    return f"{digest}/layer.tar"


def _is_tar(head: bytes) -> bool:
    """Whether a member's first block is a tar header (checksum and all) or the zero block of an empty tar."""
    if head == bytes(BLOCK):
        return True
    try:
        tarfile.TarInfo.frombuf(head, tarfile.ENCODING, "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def _rejoined(head: bytes, rest: IO[bytes]) -> Iterator[bytes]:
    yield head
    yield from iter(lambda: rest.read(_CHUNK), b"")


def _document(source: str, member: tarfile.TarInfo, head: bytes, rest: IO[bytes]) -> bytes:
    if member.size > _MAX_DOCUMENT:
        raise ReproducibleError(
            f"the `docker save` archive of {source}: {member.name} ({member.size} bytes) is neither a layer tar "
            "nor a document of the image"
        )
    return head + rest.read()


def _link_target(member: tarfile.TarInfo) -> str:
    """The member a link names: a symlink relative to its folder, a hard link from the archive's root."""
    if member.islnk():
        return posixpath.normpath(member.linkname)
    return posixpath.normpath(posixpath.join(posixpath.dirname(member.name), member.linkname))


def _manifest(source: str, documents: dict[str, bytes]) -> tuple[str, list[str]]:
    """The config's member and the layers' members, in image order, of the one image manifest.json lists."""
    listing = json.loads(_saved_member(source, documents, "manifest.json", "manifest"))
    entry = listing[0] if isinstance(listing, list) and len(listing) == 1 else None
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("Config"), str)
        or not isinstance(entry.get("Layers"), list)
    ):
        raise ReproducibleError(f"the `docker save` archive of {source}: manifest.json does not list one image")
    return entry["Config"], [str(layer) for layer in entry["Layers"]]


def _saved_member(source: str, documents: dict[str, bytes], name: str, what: str) -> bytes:
    if name not in documents:
        raise ReproducibleError(f"the `docker save` archive of {source} has no {what} {name}")
    return documents[name]


def _saved_layer(source: str, layer: str, diff_ids: dict[str, str], links: dict[str, str]) -> str:
    """The clamped diff ID of the manifest's `layer`, through the links a save makes for a layer it has."""
    name = layer
    for _ in range(_MAX_LINKS):
        if name in diff_ids:
            return diff_ids[name]
        if name not in links:
            break
        name = links[name]
    raise ReproducibleError(f"the `docker save` archive of {source}: its manifest's layer {layer} is not a layer tar")
