"""Registry manifest digests that depend on the image alone: the image written by skopeo to an OCI layout with
fixed gzip compression, and that layout pushed unchanged (digests preserved) to a registry.

`docker push` compresses each layer when it first pushes it and then remembers the compressed digest per layer
(its distribution metadata), so two pushes from one engine share one compression and prove nothing about two
machines. A layout written from an empty folder compresses every layer again, with one named compressor and
level (skopeo's gzip, level 6), so two builds give the same manifest digest exactly when their layers and config
are the same bytes and the skopeo version is the same. skopeo writes an OCI config: its digest is not the Docker
image ID, but a function of it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import ToolMissingError
from learnerkit_build import registry
from learnerkit_build.errors import BuildToolError

COMPRESSION = ("--dest-compress", "--dest-compress-format", "gzip", "--dest-compress-level", "6")
TIMEOUT_S = 900


class LayoutError(BuildToolError):
    """skopeo could not write the layout or push it, or the registry does not serve what was pushed."""


@dataclass(frozen=True)
class PushedImage:
    """What the registry reports for one pushed image."""

    reference: str
    manifest: str
    """The manifest digest the registry serves for the tag."""
    config: str
    layers: tuple[str, ...]
    """The compressed layers' digests, in order."""


def skopeo_exe() -> str:
    exe = shutil.which("skopeo")
    if exe is None:
        raise ToolMissingError("skopeo is not installed (Debian package `skopeo`; `make setup` installs it)")
    return exe


def daemon_source(image_id: str) -> str:
    """skopeo's name of an image on this engine."""
    return f"docker-daemon:{image_id}"


def archive_source(archive: Path) -> str:
    """skopeo's name of the one image in a `docker save` archive (the base, made without the engine)."""
    return f"docker-archive:{archive}"


def write_layout(source: str, layout: Path, tag: str) -> None:
    """The image skopeo names `source` as an OCI layout at `layout` (a folder that must not exist yet)."""
    if layout.exists():
        raise LayoutError(f"{layout} exists: a layout is written into a new folder, so every layer is compressed")
    _skopeo("copy", "--quiet", *COMPRESSION, source, f"oci:{layout}:{tag}")


def push_layout(layout: Path, tag: str, target_registry: str, repository: str) -> PushedImage:
    """Push the layout's `tag` byte for byte to `target_registry/repository:tag`; what the registry serves."""
    reference = f"{target_registry}/{repository}:{tag}"
    tls = "false" if target_registry.startswith(("127.", "localhost")) else "true"
    _skopeo(
        "copy",
        "--quiet",
        "--preserve-digests",
        f"--dest-tls-verify={tls}",
        f"oci:{layout}:{tag}",
        f"docker://{reference}",
    )
    found = registry.get_manifest(target_registry, repository, tag)
    if found is None:
        raise LayoutError(f"{reference}: pushed, but the registry does not serve it")
    body, digest = found
    manifest = json.loads(body)
    return PushedImage(
        reference,
        digest,
        str(manifest["config"]["digest"]),
        tuple(str(layer["digest"]) for layer in manifest["layers"]),
    )


def push_image(source: str, scratch: Path, target_registry: str, repository: str, tag: str) -> PushedImage:
    """The image `source` through a new layout under `scratch` to the registry."""
    layout = scratch / "oci-layout"
    write_layout(source, layout, tag)
    return push_layout(layout, tag, target_registry, repository)


def _skopeo(*argv: str) -> None:
    try:
        done = subprocess.run(
            [skopeo_exe(), *argv], capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise LayoutError(f"skopeo {argv[0]} took more than {TIMEOUT_S} s") from e
    if done.returncode != 0:
        raise LayoutError(f"skopeo {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
