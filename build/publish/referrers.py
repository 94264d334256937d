"""Attestations as OCI 1.1 referrers, found with or without the registry's referrers API, and cosign's tags.

Each DSSE envelope is a blob in a manifest of its own whose `subject` is the image and whose `artifactType`
is the DSSE media type (the predicate type in the `in-toto.io/predicate-type` annotation). A registry that
indexes `subject` answers `GET /v2/<name>/referrers/<digest>`; for one that does not (distribution 2.8, the
Debian docker-registry) the referrers tag schema applies: tag `sha256-<hex>` holds an image index of them.
cosign's own layout is written too: `sha256-<hex>.sig` (simple signing) and `sha256-<hex>.att` (the same
envelopes as layers), so `cosign verify` and `cosign verify-attestation` read what this module pushes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from learnerkit_build.attestations.envelope import canonical
from learnerkit_build.publish import registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DSSE = "application/vnd.dsse.envelope.v1+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
COSIGN_SIGNATURE = "dev.cosignproject.cosign/signature"
EMPTY = b"{}"


@dataclass(frozen=True)
class Referrer:
    """A manifest that refers to the image: its descriptor as the index lists it."""

    digest: str
    size: int
    artifact_type: str
    annotations: dict[str, str]


def tag_schema_tag(digest: str) -> str:
    return digest.replace(":", "-")


def _descriptor(media_type: str, data: bytes, digest: str, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": digest, "size": len(data), **extra}


def subject_descriptor(manifest: bytes, digest: str) -> dict[str, Any]:
    media_type = json.loads(manifest).get("mediaType") or OCI_MANIFEST
    return _descriptor(str(media_type), manifest, digest)


def push_attestation(
    host: str, repository: str, subject: dict[str, Any], envelope: bytes, predicate_type: str
) -> tuple[Referrer, bool]:
    """Push one envelope as a referrer of `subject`; (its descriptor, whether the registry indexed it)."""
    layer = registry.put_blob(host, repository, envelope)
    config = registry.put_blob(host, repository, EMPTY)
    annotations = {PREDICATE_ANNOTATION: predicate_type}
    manifest = canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": DSSE,
            "config": _descriptor(OCI_EMPTY, EMPTY, config),
            "layers": [_descriptor(DSSE, envelope, layer, annotations=annotations)],
            "subject": subject,
            "annotations": annotations,
        }
    )
    digest = registry.sha256_digest(manifest)
    _, indexed = registry.put_manifest_subject(host, repository, digest, manifest, OCI_MANIFEST)
    return Referrer(digest, len(manifest), DSSE, annotations), indexed


def update_tag_schema(host: str, repository: str, subject: str, added: list[Referrer]) -> None:
    """Merge `added` into the `sha256-<hex>` index: an entry of the same predicate type is replaced."""
    tag = tag_schema_tag(subject)
    kept = []
    found = registry.get_manifest(host, repository, tag)
    replaced = {r.annotations.get(PREDICATE_ANNOTATION) for r in added}
    if found is not None:
        for entry in json.loads(found[0]).get("manifests", []):
            if (entry.get("annotations") or {}).get(PREDICATE_ANNOTATION) not in replaced:
                kept.append(entry)
    entries = kept + [
        {
            "mediaType": OCI_MANIFEST,
            "digest": r.digest,
            "size": r.size,
            "artifactType": r.artifact_type,
            "annotations": r.annotations,
        }
        for r in added
    ]
    index = canonical({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
    registry.put_manifest(host, repository, tag, index, OCI_INDEX)


def discover(host: str, repository: str, subject: str) -> tuple[list[Referrer], str]:
    """The referrers of `subject` and how they were found: `referrers-api` or `tag-schema` (or `none`)."""
    index = registry.get_referrers(host, repository, subject)
    how = "referrers-api"
    if index is None:
        found = registry.get_manifest(host, repository, tag_schema_tag(subject))
        if found is None:
            return [], "none"
        index, how = json.loads(found[0]), "tag-schema"
    referrers = [
        Referrer(
            str(entry["digest"]),
            int(entry.get("size", 0)),
            str(entry.get("artifactType", "")),
            dict(entry.get("annotations") or {}),
        )
        for entry in index.get("manifests", [])
    ]
    return referrers, how


def push_cosign_signature(host: str, repository: str, subject: str, payload: bytes, signature: str) -> str:
    """cosign's `sha256-<hex>.sig`: the simple-signing payload as a layer, its signature in an annotation."""
    layer = registry.put_blob(host, repository, payload)
    annotations = {COSIGN_SIGNATURE: signature}
    layers = [(SIMPLE_SIGNING, payload, layer, annotations)]
    return _cosign_manifest(host, repository, f"{tag_schema_tag(subject)}.sig", layers)


def push_cosign_attestations(host: str, repository: str, subject: str, envelopes: list[tuple[bytes, str]]) -> str:
    """cosign's `sha256-<hex>.att`: every DSSE envelope a layer, annotated with its predicate type."""
    layers = [
        (DSSE, envelope, registry.sha256_digest(envelope), {COSIGN_SIGNATURE: "", "predicateType": predicate_type})
        for envelope, predicate_type in envelopes
    ]
    return _cosign_manifest(host, repository, f"{tag_schema_tag(subject)}.att", layers)


def _cosign_manifest(host: str, repository: str, tag: str, layers: list[tuple[str, bytes, str, dict[str, str]]]) -> str:
    config = canonical(
        {
            "architecture": "",
            "os": "",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [digest for _, _, digest, _ in layers]},
        }
    )
    manifest = canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": _descriptor(OCI_CONFIG, config, registry.put_blob(host, repository, config)),
            "layers": [
                _descriptor(media_type, data, digest, annotations=annotations)
                for media_type, data, digest, annotations in layers
            ],
        }
    )
    registry.put_manifest(host, repository, tag, manifest, OCI_MANIFEST)
    return f"{host}/{repository}:{tag}"
