"""Registry manifest digests that depend on the image alone: the image written by skopeo into a fresh folder
(its `dir:` layout) with fixed gzip compression, and that folder pushed unchanged (digests preserved).

`docker push` compresses each layer when it first pushes it and then remembers the compressed digest per layer
(its distribution metadata), so two pushes from one engine share one compression and prove nothing about two
machines. A layout written into an empty folder compresses every layer again, with one named compressor and
level (skopeo's gzip, level 6), so two builds give the same manifest digest exactly when their layers and config
are the same bytes and the skopeo version is the same.

The layout holds the Docker schema 2 manifest skopeo makes of the image and the image's own config: the
manifest's config digest is the image ID, and `docker pull` of the pushed image gives that image ID. An OCI
layout (`oci:`) would not: skopeo converts the config to OCI's, which has no HEALTHCHECK or SHELL, so the
registry would hold another image ID than the one built and tested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import ToolMissingError
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.errors import BuildToolError
from learnerkit_build.publish import registry

COMPRESSION = ("--dest-compress", "--dest-compress-format", "gzip", "--dest-compress-level", "6")
COMPRESSION_NAME = "gzip, level 6"
METHOD = "skopeo-dir-layout"
"""How `push_fresh` pushes, as `image publish --output json` says it."""
MANIFEST = "manifest.json"
TIMEOUT_S = 900


class LayoutError(BuildToolError):
    """skopeo could not write the layout or push it, or the registry does not serve what was pushed."""


@dataclass(frozen=True)
class PushedImage:
    """What the registry reports for one pushed image."""

    reference: str
    manifest: str
    """The manifest digest the registry serves for the tag: the layout's own."""
    media_type: str
    config: str
    """The config's digest: the image ID."""
    layers: tuple[str, ...]
    """The compressed layers' digests, in order."""
    size: int
    """Bytes of the config and the compressed layers, as the manifest gives them."""


@dataclass(frozen=True)
class LayoutPush:
    """An image pushed through a fresh layout: how, and what the registry serves."""

    method: str
    skopeo: str
    """skopeo's version: with the image's bytes, what the manifest digest depends on."""
    compression: str
    image: PushedImage
    write_seconds: float
    """Writing the layout: the engine's `docker save`, skopeo's copy of it, every layer compressed."""
    push_seconds: float


def skopeo_exe() -> str:
    exe = shutil.which("skopeo")
    if exe is None:
        raise ToolMissingError("skopeo is not installed (Debian package `skopeo`; `make setup` installs it)")
    return exe


def skopeo_version() -> str:
    """`1.9.3` of `skopeo version 1.9.3`."""
    return _skopeo("--version").split()[-1]


def daemon_source(image_id: str) -> str:
    """skopeo's name of an image on this engine."""
    return f"docker-daemon:{image_id}"


def archive_source(archive: Path) -> str:
    """skopeo's name of the one image in a `docker save` archive (the base, made without the engine)."""
    return f"docker-archive:{archive}"


def write_layout(source: str, layout: Path) -> str:
    """The image skopeo names `source` written into `layout`, a folder that must not exist yet; its manifest
    digest. skopeo's temporary files (from the engine, a copy of the whole image uncompressed) go beside it."""
    if layout.exists():
        raise LayoutError(f"{layout} exists: a layout is written into a new folder, so every layer is compressed")
    _skopeo("copy", "--quiet", *COMPRESSION, source, f"dir:{layout}", tmpdir=layout.parent)
    return layout_digest(layout)


def layout_digest(layout: Path) -> str:
    """The digest of the manifest a layout holds: the one a registry serves for it, pushed unchanged."""
    try:
        return registry.sha256_digest((layout / MANIFEST).read_bytes())
    except FileNotFoundError as e:
        raise LayoutError(f"{layout} holds no {MANIFEST}: not a layout skopeo wrote") from e


def push_layout(layout: Path, target_registry: str, repository: str, tag: str) -> PushedImage:
    """Push the layout byte for byte to `target_registry/repository:tag`; what the registry serves."""
    reference = f"{target_registry}/{repository}:{tag}"
    written = layout_digest(layout)
    tls = "false" if target_registry.startswith(("127.", "localhost")) else "true"
    _skopeo(
        "copy", "--quiet", "--preserve-digests", f"--dest-tls-verify={tls}", f"dir:{layout}", f"docker://{reference}"
    )
    found = registry.get_manifest(target_registry, repository, tag)
    if found is None:
        raise LayoutError(f"{reference}: pushed, but the registry does not serve it")
    body, digest = found
    if digest != written:
        raise LayoutError(f"{reference}: pushed {written} from {layout}, but the registry serves {digest}")
    manifest = json.loads(body)
    parts = [manifest["config"], *manifest["layers"]]
    return PushedImage(
        reference,
        digest,
        str(manifest.get("mediaType")),
        str(manifest["config"]["digest"]),
        tuple(str(layer["digest"]) for layer in manifest["layers"]),
        sum(int(part["size"]) for part in parts),
    )


def push_image(source: str, scratch: Path, target_registry: str, repository: str, tag: str) -> PushedImage:
    """The image `source` through a new layout under `scratch` to the registry."""
    layout = scratch / "layout"
    write_layout(source, layout)
    return push_layout(layout, target_registry, repository, tag)


def push_fresh(source: str, size: int, target_registry: str, repository: str, tag: str, on_line: LogSink) -> LayoutPush:
    """The image `source` (`size` bytes uncompressed) through a layout in a new temporary folder (tempfile's, so
    `TMPDIR`; removed after, pushed or not) to the registry, saying on `on_line` what it does. The folder holds
    skopeo's copy of the image, uncompressed, and the compressed layout at once: up to twice `size`, which must
    be free there before anything is written."""
    version = skopeo_version()
    with tempfile.TemporaryDirectory(prefix="learnerkit-layout-") as scratch:
        free = shutil.disk_usage(scratch).free
        if free < 2 * size:
            raise LayoutError(
                f"{source}: a layout of it needs up to {_gb(2 * size)} in {scratch} (skopeo's copy of the image, "
                f"uncompressed, and the compressed layout), {_gb(free)} are free: set TMPDIR to a folder with room"
            )
        layout = Path(scratch) / "layout"
        on_line(
            f"writing {source} ({_gb(size)}) into a fresh layout in {scratch} (skopeo {version}, {COMPRESSION_NAME})"
        )
        started = time.monotonic()
        digest = write_layout(source, layout)
        written = time.monotonic()
        on_line(f"layout written in {written - started:.1f} s, manifest {digest}; pushing it to {target_registry}")
        pushed = push_layout(layout, target_registry, repository, tag)
        done = time.monotonic()
    on_line(f"pushed {pushed.reference} in {done - written:.1f} s: {len(pushed.layers)} layers, {_gb(pushed.size)}")
    return LayoutPush(METHOD, version, COMPRESSION_NAME, pushed, round(written - started, 1), round(done - written, 1))


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"


def _skopeo(*argv: str, tmpdir: Path | None = None) -> str:
    """skopeo's standard output; its temporary files in `tmpdir` (default: /var/tmp)."""
    options = ["--tmpdir", str(tmpdir)] if tmpdir is not None else []
    try:
        done = subprocess.run(
            [skopeo_exe(), *options, *argv],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise LayoutError(f"skopeo {argv[0]} took more than {TIMEOUT_S} s") from e
    if done.returncode != 0:
        raise LayoutError(f"skopeo {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout
