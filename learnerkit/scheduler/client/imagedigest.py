"""What `job verify` asks about an image reference: the registry the reference names (the manifest it serves
under the tag or digest, and that manifest's config: the image ID), else the local engine (the image ID).

A registry is the authority for a reference that names one: a local engine's tag may be older or newer than
what the registry serves. An index (several platforms) is read down to this machine's Linux platform.
"""

from __future__ import annotations

import json
import platform

from learnerkit.common.engine import EngineError, image_id
from learnerkit.scheduler.provenance.verify import ImageAnswer
from learnerkit_build.publish.registry import RegistryError, get_manifest

ENGINE = "the engine"
_INDEX_TYPES = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


def image_answer(reference: str) -> ImageAnswer:
    """The registry's answer where ``reference`` names a registry, else the local engine's."""
    host, repository, tag = split_reference(reference)
    if host is None:
        return engine_answer(reference)
    return registry_answer(host, repository, tag)


def split_reference(reference: str) -> tuple[str | None, str, str]:
    """(registry host or None, repository, tag or ``sha256:`` digest) as the engine reads ``reference``: the
    first component is a host only when it has a ``.`` or a ``:`` or is ``localhost``."""
    name, _, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    has_host = bool(slash) and ("." in first or ":" in first or first == "localhost")
    path = rest if has_host else name
    repository, tag = path, "latest"
    if ":" in path.rsplit("/", 1)[-1]:
        repository, _, tag = path.rpartition(":")
    return (first if has_host else None), repository, digest or tag


def engine_answer(reference: str) -> ImageAnswer:
    try:
        held = image_id(reference)
    except EngineError as e:
        return ImageAnswer(ENGINE, problem=str(e))
    return ImageAnswer(ENGINE, frozenset({held}) if held else frozenset())


def registry_answer(host: str, repository: str, tag: str) -> ImageAnswer:
    """The manifest's digest(s) and its config's digest (the image ID) that ``host`` serves under ``tag``."""
    source = f"registry {host}"
    digests: set[str] = set()
    try:
        found = get_manifest(host, repository, tag)
        while found is not None:
            body, digest = found
            digests.add(digest)
            manifest = json.loads(body)
            if manifest.get("mediaType") not in _INDEX_TYPES and "manifests" not in manifest:
                digests.add(str(manifest["config"]["digest"]))
                return ImageAnswer(source, frozenset(digests))
            child = _platform_manifest(manifest)
            if child is None:
                return ImageAnswer(source, problem=f"{repository}:{tag} has no manifest for {_platform()}")
            found = get_manifest(host, repository, child)
    except RegistryError as e:
        return ImageAnswer(source, problem=str(e))
    except (ValueError, KeyError, TypeError) as e:
        return ImageAnswer(source, problem=f"{repository}:{tag}: not an image manifest ({e})")
    return ImageAnswer(source)


def _platform_manifest(index: dict[str, object]) -> str | None:
    os_name, architecture = _platform().split("/")
    entries = index.get("manifests")
    for entry in entries if isinstance(entries, list) else []:
        wanted = entry.get("platform", {})
        if wanted.get("os") == os_name and wanted.get("architecture") == architecture:
            return str(entry["digest"])
    return None


def _platform() -> str:
    machine = platform.machine()
    return f"linux/{_ARCHITECTURES.get(machine, machine)}"
