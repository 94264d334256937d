"""SLSA provenance v1 of a learner image, from what its build recorded (labels) and what its SBOM lists.

Resolved dependencies: the project's source commit (`gitCommit`), every file of `learner_base/` and the
framework's folder at that commit (`gitBlob`), the local Debian base image (its image ID and recipe), and every
Debian package and Python distribution of the SBOM: by purl, and by the sha256 of its .deb or wheel where the
SBOM has it from the image's lock (every package of a locked image but those vendored inside another's wheel).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnerkit_build.scan.sbom import all_components

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://learnerkit.dev/buildtypes/learner-image/v1"
BUILDER_ID = "https://learnerkit.dev/builders/local-buildkit/v1"
REVISION_LABEL = "org.opencontainers.image.revision"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
PARAMETER_LABELS = {
    "framework": "io.learnerkit.framework",
    "version": "io.learnerkit.framework.version",
    "variant": "io.learnerkit.variant",
    "python": "io.learnerkit.python",
    "accelerator": "io.learnerkit.accelerator",
    "cuda": "io.learnerkit.cuda",
}
BASE_ANNOTATIONS = {
    "suite": "io.learnerkit.base.suite",
    "mirror": "io.learnerkit.base.mirror",
    "securityMirror": "io.learnerkit.base.security-mirror",
    "mmdebstrap": "io.learnerkit.base.mmdebstrap",
    "recipeHash": "io.learnerkit.base.recipe-hash",
}


@dataclass(frozen=True)
class SourceFile:
    path: str
    blob: str
    """The git blob id (sha1) at the build's commit."""


def source_files(root: Path, commit: str, folders: list[str]) -> list[SourceFile]:
    """The files under `folders` at `commit` in the checkout at `root`; empty when git cannot say."""
    if not COMMIT.match(commit):
        return []
    try:
        listing = subprocess.run(
            ["git", "-C", str(root), "ls-tree", "-r", "--full-tree", commit, "--", *folders],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    files = []
    for line in listing.splitlines():
        meta, _, path = line.partition("\t")
        _, kind, blob = meta.split()
        if kind == "blob":
            files.append(SourceFile(path, blob))
    return files


def resolved_dependencies(labels: dict[str, str], sources: list[SourceFile], sbom: dict[str, Any]) -> list[Any]:
    revision = labels.get(REVISION_LABEL, "unknown")
    commit = revision.removesuffix("-dirty")
    found: list[dict[str, Any]] = []
    if COMMIT.match(commit):
        source: dict[str, Any] = {"name": "learnerkit", "digest": {"gitCommit": commit}}
        if revision.endswith("-dirty"):
            source["annotations"] = {"dirty": True}
        found.append(source)
    found += [{"name": f.path, "digest": {"gitBlob": f.blob}} for f in sources]
    base_id = labels.get("org.opencontainers.image.base.digest", "")
    if base_id.startswith("sha256:"):
        base: dict[str, Any] = {
            "name": labels.get("org.opencontainers.image.base.name", "base"),
            "digest": {"sha256": base_id.removeprefix("sha256:")},
            "mediaType": "application/vnd.docker.container.image.v1+json",
        }
        annotations = {key: labels[label] for key, label in BASE_ANNOTATIONS.items() if labels.get(label)}
        if annotations:
            base["annotations"] = annotations
        found.append(base)
    packages: dict[str, dict[str, Any]] = {}
    for component in all_components(sbom):
        if not component.get("purl"):
            continue
        entry: dict[str, Any] = {"name": str(component["name"]), "uri": str(component["purl"])}
        sha256 = [h["content"] for h in component.get("hashes", []) if h.get("alg") == "SHA-256"]
        if sha256:
            entry["digest"] = {"sha256": sha256[0]}
        packages.setdefault(entry["uri"], entry)
    return found + [packages[uri] for uri in sorted(packages)]


def provenance(labels: dict[str, str], sources: list[SourceFile], sbom: dict[str, Any]) -> dict[str, Any]:
    """The predicate; its only time is the build's (`org.opencontainers.image.created`)."""
    parameters = {key: labels[label] for key, label in PARAMETER_LABELS.items() if labels.get(label)}
    metadata: dict[str, str] = {}
    if labels.get("io.learnerkit.inputs-hash"):
        metadata["invocationId"] = labels["io.learnerkit.inputs-hash"]
    if labels.get("org.opencontainers.image.created"):
        metadata["finishedOn"] = labels["org.opencontainers.image.created"].replace("+00:00", "Z")
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": parameters,
            "internalParameters": {
                "inputsHash": labels.get("io.learnerkit.inputs-hash", ""),
                "revision": labels.get(REVISION_LABEL, "unknown"),
            },
            "resolvedDependencies": resolved_dependencies(labels, sources, sbom),
        },
        "runDetails": {"builder": {"id": BUILDER_ID}, "metadata": metadata},
    }
