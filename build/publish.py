"""`learnerkit image publish|verify`: push only what was tested and scanned, with SBOM, report and signature.

Alongside the image, the registry gets an OCI artifact tagged `sha256-<digest>.att` whose layers are the
CycloneDX SBOM, the scan report and a DSSE envelope. Its in-toto statement names the image digest and the two
documents' hashes; `verify` checks every link of that chain against the registry's current content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnerkit.common import engine
from learnerkit_build import attest, registry
from learnerkit_build.errors import BuildToolError
from learnerkit_build.imagetest import CHECKS, image_test_record
from learnerkit_build.scan.records import REPORT, SBOM, load_record
from learnerkit_build.scan.runner import sha256_hex
from learnerkit_build.state import read_json

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.learnerkit.scan-gate.v1+json"
LAYER_TYPES = {
    "sbom": "application/vnd.cyclonedx+json",
    "report": "application/vnd.learnerkit.scan-report+json",
    "envelope": "application/vnd.dsse.envelope.v1+json",
}


class PublishRefused(BuildToolError):
    """A gate of publish failed: the message says which (test or scan) and for which image ID."""


class VerifyFailed(BuildToolError):
    """What the registry holds does not match its signed statement."""


@dataclass(frozen=True)
class PublishResult:
    reference: str
    image_id: str
    pushed: str
    digest: str
    attestation: str
    key_id: str


@dataclass(frozen=True)
class VerifyResult:
    reference: str
    digest: str
    image_id: str
    key_id: str
    sbom_sha256: str
    report_sha256: str


def check_gates(reference: str) -> tuple[str, bytes, bytes]:
    """The image ID and its recorded SBOM and report, if its test and scan passed for that exact ID."""
    image_id = engine.image_id(reference)
    if image_id is None:
        raise PublishRefused(f"{reference} is not on this engine")
    test = read_json(image_test_record(image_id))
    if test is None:
        raise PublishRefused(f"test gate: {reference} ({image_id}) was never tested: run `learnerkit image test`")
    ran = {check["name"] for check in test.get("checks", [])}
    if not test.get("passed") or not set(CHECKS) <= ran:
        missing = ", ".join(sorted(set(CHECKS) - ran)) or "none"
        raise PublishRefused(f"test gate: {reference} ({image_id}) did not pass every test (not run: {missing})")
    record = load_record(image_id)
    if record is None:
        raise PublishRefused(f"scan gate: {reference} ({image_id}) was never scanned: run `learnerkit image scan`")
    if not record.passed:
        raise PublishRefused(f"scan gate: the scan of {reference} ({image_id}) failed; see {record.folder / REPORT}")
    sbom, report = (record.folder / SBOM).read_bytes(), (record.folder / REPORT).read_bytes()
    if sha256_hex(sbom) != record.sbom_sha256 or sha256_hex(report) != record.report_sha256:
        raise PublishRefused(f"scan gate: the recorded SBOM or report of {image_id} changed after the scan")
    return image_id, sbom, report


def publish(reference: str, repository: str, tag: str, target_registry: str, key_path: Path | None) -> PublishResult:
    image_id, sbom, report = check_gates(reference)
    remote = f"{target_registry}/{repository}"
    engine.tag_image(image_id, remote, tag)
    digest = engine.push_image(remote, tag)
    key = attest.load_or_create_key(key_path)
    envelope = attest.sign(attest.statement(remote, digest, image_id, sha256_hex(sbom), sha256_hex(report)), key)
    blobs = {"sbom": sbom, "report": report, "envelope": json.dumps(envelope, indent=2).encode()}
    attestation = attach(target_registry, repository, digest, blobs)
    return PublishResult(reference, image_id, f"{remote}:{tag}", digest, attestation, attest.key_id(key.public_key()))


def attestation_tag(digest: str) -> str:
    return digest.replace(":", "-") + ".att"


def attach(target_registry: str, repository: str, digest: str, blobs: dict[str, bytes]) -> str:
    config = json.dumps({"subject": digest}).encode()
    layers = []
    for name, data in blobs.items():
        layer_digest = registry.put_blob(target_registry, repository, data)
        layers.append(
            {
                "mediaType": LAYER_TYPES[name],
                "digest": layer_digest,
                "size": len(data),
                "annotations": {"org.opencontainers.image.title": name},
            }
        )
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": ARTIFACT_TYPE,
            "digest": registry.put_blob(target_registry, repository, config),
            "size": len(config),
        },
        "layers": layers,
        "annotations": {"io.learnerkit.subject": digest},
    }
    tag = attestation_tag(digest)
    registry.put_manifest(target_registry, repository, tag, json.dumps(manifest).encode(), OCI_MANIFEST)
    return f"{target_registry}/{repository}:{tag}"


def verify(target_registry: str, repository: str, tag: str, public_key: Path) -> VerifyResult:
    where = f"{target_registry}/{repository}:{tag}"
    found = registry.get_manifest(target_registry, repository, tag)
    if found is None:
        raise VerifyFailed(f"{where}: no such image in the registry")
    _, digest = found
    attached = registry.get_manifest(target_registry, repository, attestation_tag(digest))
    if attached is None:
        raise VerifyFailed(f"{where} ({digest}): no attestation for this digest (unsigned, or re-tagged)")
    manifest: dict[str, Any] = json.loads(attached[0])
    blobs = {}
    for layer in manifest.get("layers", []):
        name = (layer.get("annotations") or {}).get("org.opencontainers.image.title")
        if name in LAYER_TYPES:
            blobs[name] = registry.get_blob(target_registry, repository, layer["digest"])
    if set(blobs) != set(LAYER_TYPES):
        raise VerifyFailed(f"{where}: attestation lacks {', '.join(sorted(set(LAYER_TYPES) - set(blobs)))}")
    key = attest.load_public_key(public_key)
    try:
        statement = attest.open_envelope(json.loads(blobs["envelope"]), key)
    except (attest.AttestationError, json.JSONDecodeError) as e:
        raise VerifyFailed(f"{where}: signature check failed: {e}") from e
    subjects = [s["digest"].get("sha256") for s in statement.get("subject", [])]
    if digest.removeprefix("sha256:") not in subjects:
        raise VerifyFailed(f"{where}: the signed statement names {subjects}, not the image digest {digest}")
    predicate = statement["predicate"]
    for name, field in (("sbom", "sbom"), ("report", "scanReport")):
        signed = predicate[field]["digest"]["sha256"]
        if sha256_hex(blobs[name]) != signed:
            raise VerifyFailed(f"{where}: the {name} in the registry differs from the signed one (sha256 {signed})")
    report = json.loads(blobs["report"])
    if not report.get("passed") or report.get("image_id") != predicate["imageId"]:
        raise VerifyFailed(f"{where}: the signed scan report is not a passed scan of {predicate['imageId']}")
    return VerifyResult(
        where,
        digest,
        predicate["imageId"],
        attest.key_id(key),
        predicate["sbom"]["digest"]["sha256"],
        predicate["scanReport"]["digest"]["sha256"],
    )
