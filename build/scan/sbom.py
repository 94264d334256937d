"""A CycloneDX SBOM (1.6 JSON, 1.5 on request) of Debian packages and Python distributions, schema-validated.

Each package carries the sha256 of its .deb or wheel where the image's lock names that package at that version
(and architecture), the licence it states (`learnerkit_build.scan.licences`), and `dependencies` holds the graph
dpkg and the distributions' metadata record (`learnerkit_build.scan.graph`). The document is a function of the
image and its lock: no clock, path or host reaches it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from learnerkit_build.errors import BuildToolError
from learnerkit_build.lock.model import Lock, normalise_name, read_lock
from learnerkit_build.scan.graph import deb_dependencies, python_dependencies
from learnerkit_build.scan.layers import ImageIndex
from learnerkit_build.scan.licences import deb_licences, python_licences
from learnerkit_build.scan.packages import DebPackage, PythonDist, os_release

SPEC_VERSIONS = {"1.6": SchemaVersion.V1_6, "1.5": SchemaVersion.V1_5}
INPUTS_HASH_LABEL = "io.learnerkit.inputs-hash"
BASE_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"


class SbomError(BuildToolError):
    """The SBOM does not validate against its CycloneDX schema."""


@dataclass(frozen=True)
class ImageLock:
    """The lock an image was built from, and the sha256 of its file as committed."""

    lock: Lock
    sha256: str


def read_image_lock(path: Path) -> ImageLock:
    return ImageLock(read_lock(path), hashlib.sha256(path.read_bytes()).hexdigest())


def _digest(sha256: str) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": sha256}]


def deb_ref(package: DebPackage) -> str:
    return f"deb:{package.name}:{package.architecture}"


def pypi_ref(dist: PythonDist) -> str:
    return f"pypi:{dist.path}"


def _prop(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def deb_purl(package: DebPackage, distro: str) -> str:
    qualifiers = f"arch={package.architecture}" + (f"&distro={distro}" if distro else "")
    if package.source != package.name:
        qualifiers += f"&upstream={quote(package.source, safe='')}"
    return f"pkg:deb/debian/{quote(package.name, safe='')}@{quote(package.version, safe='')}?{qualifiers}"


def pypi_purl(dist: PythonDist) -> str:
    name = re.sub(r"[-_.]+", "-", dist.name).lower()
    return f"pkg:pypi/{name}@{quote(dist.version, safe='')}"


def document_time(created: Any) -> str | None:
    """SOURCE_DATE_EPOCH when set, else the image's creation time, else none (never the clock): identical images,
    identical SBOMs."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        return datetime.fromtimestamp(int(epoch), UTC).isoformat(timespec="seconds")
    if isinstance(created, str) and created:
        # The engine writes UTC with nanoseconds (`2024-05-01T10:00:00.123456789Z`): seconds are enough.
        return datetime.fromisoformat(created[:19] + "+00:00").isoformat(timespec="seconds")
    return None


def build_sbom(
    index: ImageIndex,
    image_id: str,
    debs: list[DebPackage],
    dists: list[PythonDist],
    spec_version: str = "1.6",
    lock: ImageLock | None = None,
) -> dict[str, Any]:
    if spec_version not in SPEC_VERSIONS:
        raise SbomError(f"CycloneDX {spec_version} is not supported; valid: {', '.join(SPEC_VERSIONS)}")
    release = os_release(index)
    distro = f"{release.get('ID', '')}-{release.get('VERSION_ID', '')}" if release.get("ID") else ""
    labels = index.container_config.get("Labels") or {}
    components: list[dict[str, Any]] = []
    if release.get("ID"):
        components.append(
            {
                "type": "operating-system",
                "bom-ref": f"os:{release['ID']}:{release.get('VERSION_ID', '')}",
                "name": release["ID"],
                "version": release.get("VERSION_ID", ""),
                "description": release.get("PRETTY_NAME", ""),
            }
        )
    locked_debs = {(d.package, d.version, d.architecture): d for d in lock.lock.debian} if lock else {}
    for package in debs:
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": deb_ref(package),
            "name": package.name,
            "version": package.version,
            "purl": deb_purl(package, distro),
            "properties": [
                _prop("learnerkit:package:type", "deb"),
                _prop("learnerkit:deb:source", package.source),
                _prop("learnerkit:deb:source-version", package.source_version),
            ],
        }
        if locked := locked_debs.get((package.name, package.version, package.architecture)):
            component["hashes"] = _digest(locked.sha256)
            component["properties"].append(_prop("learnerkit:file", locked.filename))
        if licences := deb_licences(index, package.name):
            component["licenses"] = licences
        components.append(component)
    components += _python_components(dists, lock.lock if lock else None)
    image_props = [_prop("learnerkit:image-id", image_id)]
    if lock is not None:
        image_props += [_prop("learnerkit:lock", lock.lock.image), _prop("learnerkit:lock-sha256", lock.sha256)]
    for label, name in (
        (BASE_LABEL, "base-image"),
        (BASE_DIGEST_LABEL, "base-image-id"),
        (INPUTS_HASH_LABEL, "inputs-hash"),
    ):
        if labels.get(label):
            image_props.append(_prop(f"learnerkit:{name}", str(labels[label])))
    return {
        "bomFormat": "CycloneDX",
        "specVersion": spec_version,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'learnerkit:sbom:{spec_version}:{image_id}')}",
        "version": 1,
        "metadata": {
            **({"timestamp": time} if (time := document_time(index.config.get("created"))) else {}),
            "tools": {
                "components": [{"type": "application", "name": "learnerkit", "version": dist_version("learnerkit")}]
            },
            "component": {
                "type": "container",
                "bom-ref": image_id,
                "name": index.reference,
                "version": image_id,
                "properties": image_props,
            },
        },
        "components": components,
        "dependencies": _dependencies(image_id, components, debs, dists, str(index.config.get("architecture") or "")),
    }


def _dependencies(
    image_id: str, components: list[dict[str, Any]], debs: list[DebPackage], dists: list[PythonDist], arch: str
) -> list[dict[str, Any]]:
    """The image depends on every top-level component; each package on what dpkg or its metadata names; every
    component is listed, one with no dependency with an empty `dependsOn` (known to have none)."""
    edges: dict[str, list[str]] = {image_id: [str(c["bom-ref"]) for c in components]}
    for package, targets in deb_dependencies(debs).items():
        edges[deb_ref(package)] = [deb_ref(t) for t in targets]
    for dist, needed in python_dependencies(dists, arch).items():
        edges[pypi_ref(dist)] = [pypi_ref(t) for t in needed]
    for component in components:
        edges.setdefault(str(component["bom-ref"]), [])
    return [{"ref": ref, "dependsOn": sorted(set(edges[ref]))} for ref in sorted(edges)]


def validate_sbom(sbom: dict[str, Any]) -> None:
    version = str(sbom.get("specVersion"))
    validator = JsonStrictValidator(SPEC_VERSIONS[version])
    error = validator.validate_str(json.dumps(sbom))
    if error is not None:
        raise SbomError(f"SBOM of {sbom['metadata']['component']['name']} is not valid CycloneDX {version}: {error}")


def _python_components(dists: list[PythonDist], lock: Lock | None) -> list[dict[str, Any]]:
    """One component per distribution; a vendored one nested in the components of the one that vendors it (its
    bytes came in that distribution's wheel, which the lock names, so it has no hash of its own)."""
    locked = {(w.name, w.version): w for w in lock.python} if lock else {}
    made: dict[str, dict[str, Any]] = {}
    for dist in dists:
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": pypi_ref(dist),
            "name": dist.name,
            "version": dist.version,
            "purl": pypi_purl(dist),
            "properties": [_prop("learnerkit:package:type", "python"), _prop("learnerkit:location", dist.path)],
        }
        wheel = None if dist.vendored_by else locked.get((normalise_name(dist.name), dist.version))
        if wheel is not None:
            component["hashes"] = _digest(wheel.sha256)
            component["properties"].append(_prop("learnerkit:file", wheel.filename))
        if licences := python_licences(dist):
            component["licenses"] = licences
        made[dist.path] = component
    top: list[dict[str, Any]] = []
    for dist in dists:
        owner = made.get(dist.vendored_by) if dist.vendored_by else None
        if owner is None:
            top.append(made[dist.path])
        else:
            owner.setdefault("components", []).append(made[dist.path])
    return top


def all_components(sbom: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every component of the SBOM, nested ones (vendored distributions) after the one that holds them."""
    todo = list(reversed(sbom.get("components", [])))
    while todo:
        component = todo.pop()
        yield component
        todo.extend(reversed(component.get("components", [])))


def component_keys(sbom: dict[str, Any]) -> set[tuple[str, str]]:
    """(name, version) of every component, for comparing with another tool's SBOM."""
    return {(str(c["name"]), str(c.get("version", ""))) for c in all_components(sbom)}
