"""Make a built image a function of its content: clamped file times and a canonical image config.

This engine (Debian's docker.io 20.10) has a BuildKit that knows no SOURCE_DATE_EPOCH: every file a RUN step
writes carries the build's clock, and the config records when each step ran. So after a locked build the image
is saved, every layer is rewritten with file times clamped to SOURCE_DATE_EPOCH (owners, modes, links, extended
attributes and order kept; atime/ctime and user/group names dropped), its config gets that date for `created`
and every history entry, and the result is loaded back. Two builds of the same inputs then have one image ID:
the config's sha256 over the same layer digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import docker.errors
import requests

from learnerkit.common import engine
from learnerkit_build.errors import BuildToolError

CREATED_LABEL = "org.opencontainers.image.created"
_KEPT_PAX_PREFIX = "SCHILY.xattr."
"""The only pax records kept: extended attributes (file capabilities). Times and names are regenerated."""


class ReproducibleError(BuildToolError):
    """An image could not be saved, rewritten or loaded back."""


def epoch_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalise_image(image: str, epoch: int) -> str:
    """Rewrite `image` (an ID) with clamped times and a canonical config; returns the new image ID."""
    with tempfile.TemporaryDirectory(prefix="learnerkit-repro-") as scratch:
        saved, rewritten = Path(scratch) / "saved.tar", Path(scratch) / "normalised.tar"
        engine.save_image(image, saved)
        new_id = rewrite_archive(saved, rewritten, epoch)
        load_archive(rewritten, new_id)
    return new_id


def load_archive(archive: Path, image_id: str) -> None:
    """`docker load` a rewritten archive, checking the engine holds it as `image_id` afterwards."""
    try:
        with archive.open("rb") as handle:
            engine.engine().images.load(handle)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        raise ReproducibleError(f"loading {archive.name} ({image_id}): {e}") from e
    if engine.image_id(image_id) != image_id:
        raise ReproducibleError(f"the engine did not load {archive.name} as {image_id}")


def layer_archive(layer_tar: Path, dest: Path, config: dict[str, Any], epoch: int) -> str:
    """A `docker load` archive at `dest` of one layer (times clamped) under `config` made canonical: an image
    made without the engine (the base), so no import time or engine default reaches it; returns its ID."""
    with (
        tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as out,
        layer_tar.open("rb") as source,
        tempfile.TemporaryFile() as layer,
    ):
        digest = clamp_layer(source, layer, epoch)
        layer.seek(0, io.SEEK_END)
        size = layer.tell()
        layer.seek(0)
        _add(out, "000/layer.tar", layer, size)
        raw = canonical_config(config, [f"sha256:{digest}"], epoch)
        image_id = hashlib.sha256(raw).hexdigest()
        _add(out, f"{image_id}.json", io.BytesIO(raw), len(raw))
        listing = json.dumps([{"Config": f"{image_id}.json", "RepoTags": None, "Layers": ["000/layer.tar"]}]).encode()
        _add(out, "manifest.json", io.BytesIO(listing), len(listing))
    return f"sha256:{image_id}"


def rewrite_archive(saved: Path, dest: Path, epoch: int) -> str:
    """A `docker save` archive rewritten into `dest`; returns the rewritten image's ID."""
    with tarfile.open(saved) as outer, tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as out:
        manifest = json.loads(_member(outer, "manifest.json"))
        config = json.loads(_member(outer, manifest[0]["Config"]))
        diff_ids, layers = [], []
        for number, name in enumerate(manifest[0]["Layers"]):
            handle = outer.extractfile(name)
            if handle is None:
                raise ReproducibleError(f"{saved}: layer {name} is not a file")
            with tempfile.TemporaryFile() as layer:
                digest = clamp_layer(handle, layer, epoch)
                layer.seek(0, io.SEEK_END)
                size = layer.tell()
                layer.seek(0)
                target = f"{number:03d}/layer.tar"
                _add(out, target, layer, size)
            diff_ids.append(f"sha256:{digest}")
            layers.append(target)
        raw = canonical_config(config, diff_ids, epoch)
        image_id = hashlib.sha256(raw).hexdigest()
        _add(out, f"{image_id}.json", io.BytesIO(raw), len(raw))
        listing = json.dumps([{"Config": f"{image_id}.json", "RepoTags": None, "Layers": layers}]).encode()
        _add(out, "manifest.json", io.BytesIO(listing), len(listing))
    return f"sha256:{image_id}"


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
    for chunk in iter(lambda: dest.read(1 << 20), b""):
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


def _member(outer: tarfile.TarFile, name: str) -> bytes:
    handle = outer.extractfile(name)
    if handle is None:
        raise ReproducibleError(f"`docker save` archive has no file {name}")
    return handle.read()


def _add(out: tarfile.TarFile, name: str, data: IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    out.addfile(info, data)
