"""How a version lies in the registry: a CNCF ModelPack artifact, its signed documents as OCI 1.1 referrers.

The version is an OCI image manifest of artifactType ``application/vnd.cncf.model.manifest.v1+json`` whose config
(``application/vnd.cncf.model.config.v1+json``) carries ModelPack's descriptor and the version's lineage, and whose
layers are the model's files (``application/vnd.cncf.model.weight.v1.raw``), each named by ModelPack's
``org.cncf.model.filepath`` annotation with its path in the job's results (the paths the model signature lists).
Each document is a manifest of its own whose ``subject`` is the version: the model signature, the provenance (with
the manifest and metric history it names), each evaluation round (with its reports), the factsheet and the card.
docker-registry 2.8 has no referrers API, so they are found through the referrers tag schema (tag
``sha256-<hex>``), as the images' attestations are (`learnerkit_build.publish.referrers`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from learnerkit.common.signing import canonical
from learnerkit.scheduler.catalog.errors import CatalogError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
MODEL_ARTIFACT = "application/vnd.cncf.model.manifest.v1+json"
MODEL_CONFIG = "application/vnd.cncf.model.config.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
DOC = "application/vnd.cncf.model.doc.v1.raw"
FILEPATH = "org.cncf.model.filepath"
DOCUMENT = "dev.learnerkit.catalog.document"
ATTESTED = "dev.learnerkit.catalog.attested"
EMPTY = b"{}"

SIGNATURE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
DSSE_TYPE = "application/vnd.dsse.envelope.v1+json"
FACTSHEET_TYPE = "application/vnd.learnerkit.factsheet.v1+json"
CARD_TYPE = "application/vnd.learnerkit.model-card.v1+markdown"
ARTIFACT_TYPES = {"signature": SIGNATURE_TYPE, "provenance": DSSE_TYPE, "factsheet": FACTSHEET_TYPE, "card": CARD_TYPE}
"""A document's artifactType by kind; an evaluation round (``evaluation-round-<r>``) is a DSSE envelope too."""


@dataclass(frozen=True)
class Blob:
    """A file of a version as the registry holds it."""

    path: str
    digest: str
    size: int


def safe_path(path: str) -> str:
    """A relative POSIX path inside the version's folder, or CatalogError naming it."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
        raise CatalogError(f"{path!r}: not a relative path inside a model's folder")
    return pure.as_posix()


def descriptor(media_type: str, digest: str, size: int, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": digest, "size": size, **extra}


def version_manifest(
    config: bytes, config_digest: str, weights: Sequence[Blob], annotations: Mapping[str, str]
) -> bytes:
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": MODEL_ARTIFACT,
            "config": descriptor(MODEL_CONFIG, config_digest, len(config)),
            "layers": [descriptor(WEIGHT, b.digest, b.size, annotations={FILEPATH: b.path}) for b in weights],
            "annotations": dict(annotations),
        }
    )


def referrer_manifest(kind: str, files: Sequence[Blob], subject: Mapping[str, Any], empty_digest: str) -> bytes:
    annotations = {DOCUMENT: kind}
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": ARTIFACT_TYPES.get(kind, DSSE_TYPE),
            "config": descriptor(OCI_EMPTY, empty_digest, len(EMPTY)),
            "layers": [descriptor(DOC, b.digest, b.size, annotations={FILEPATH: b.path}) for b in files],
            "subject": dict(subject),
            "annotations": annotations,
        }
    )


def referrers_index(entries: Sequence[Mapping[str, Any]]) -> bytes:
    return canonical({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": list(entries)})


def tag_schema_tag(digest: str) -> str:
    return digest.replace(":", "-")


def version_tag(digest: str) -> str:
    """The tag that lists a complete version (pushed last, so a version half-stored is never listed)."""
    return "v-" + digest.removeprefix("sha256:")


def parse_json(data: bytes, where: str) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except ValueError as e:
        raise CatalogError(f"{where}: not JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise CatalogError(f"{where}: not a JSON object")
    return parsed


def layers_of(manifest: Mapping[str, Any], where: str) -> list[Blob]:
    blobs = []
    for layer in manifest.get("layers", []):
        path = (layer.get("annotations") or {}).get(FILEPATH)
        if not isinstance(path, str):
            raise CatalogError(f"{where}: a layer without {FILEPATH}")
        blobs.append(Blob(safe_path(path), str(layer["digest"]), int(layer["size"])))
    return blobs
