"""A CycloneDX SBOM (1.6 JSON, 1.5 on request) of Debian packages and Python distributions, schema-validated."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import version as dist_version
from typing import Any
from urllib.parse import quote

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from learnerkit_build.errors import BuildToolError
from learnerkit_build.scan.layers import ImageIndex
from learnerkit_build.scan.packages import DebPackage, PythonDist, os_release

SPEC_VERSIONS = {"1.6": SchemaVersion.V1_6, "1.5": SchemaVersion.V1_5}
INPUTS_HASH_LABEL = "io.learnerkit.inputs-hash"
BASE_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"


class SbomError(BuildToolError):
    """The SBOM does not validate against its CycloneDX schema."""


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


def document_time(created: Any) -> str:
    """SOURCE_DATE_EPOCH when set, else the image's creation time, else now: identical images, identical SBOMs."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        return datetime.fromtimestamp(int(epoch), UTC).isoformat(timespec="seconds")
    if isinstance(created, str) and created:
        # The engine writes UTC with nanoseconds (`2024-05-01T10:00:00.123456789Z`): seconds are enough.
        return datetime.fromisoformat(created[:19] + "+00:00").isoformat(timespec="seconds")
    return datetime.now(UTC).isoformat(timespec="seconds")


def build_sbom(
    index: ImageIndex, image_id: str, debs: list[DebPackage], dists: list[PythonDist], spec_version: str = "1.6"
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
    for package in debs:
        purl = deb_purl(package, distro)
        components.append(
            {
                "type": "library",
                "bom-ref": f"deb:{package.name}:{package.architecture}",
                "name": package.name,
                "version": package.version,
                "purl": purl,
                "properties": [
                    _prop("learnerkit:package:type", "deb"),
                    _prop("learnerkit:deb:source", package.source),
                    _prop("learnerkit:deb:source-version", package.source_version),
                ],
            }
        )
    components += _python_components(dists)
    image_props = [_prop("learnerkit:image-id", image_id)]
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
            "timestamp": document_time(index.config.get("created")),
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
    }


def validate_sbom(sbom: dict[str, Any]) -> None:
    version = str(sbom.get("specVersion"))
    validator = JsonStrictValidator(SPEC_VERSIONS[version])
    error = validator.validate_str(json.dumps(sbom))
    if error is not None:
        raise SbomError(f"SBOM of {sbom['metadata']['component']['name']} is not valid CycloneDX {version}: {error}")


def _python_components(dists: list[PythonDist]) -> list[dict[str, Any]]:
    """One component per distribution; a vendored one nested in the components of the one that vendors it (its
    bytes came in that distribution's wheel, which the lock names)."""
    made: dict[str, dict[str, Any]] = {
        dist.path: {
            "type": "library",
            "bom-ref": f"pypi:{dist.path}",
            "name": dist.name,
            "version": dist.version,
            "purl": pypi_purl(dist),
            "properties": [_prop("learnerkit:package:type", "python"), _prop("learnerkit:location", dist.path)],
        }
        for dist in dists
    }
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
