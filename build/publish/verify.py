"""`learnerkit image verify`: what the registry holds for a tag, checked against its signed attestations.

The image's cosign signature (simple signing) must verify; every required statement type (SLSA provenance,
CycloneDX, OpenVEX, test result, scan report) must be present among the digest's referrers with a signature by
the key and a subject naming the digest. Referrers that do not verify are counted and reported, as cosign does.
Then the documents must agree: a passed test and scan of one image ID, whose SBOM is the signed SBOM, and a VEX
that gives the scan gate's verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnerkit_build.attestations import envelope as attest
from learnerkit_build.attestations import vex
from learnerkit_build.attestations.documents import PREDICATE_TYPES, sbom_purls
from learnerkit_build.attestations.key import load_public_key
from learnerkit_build.errors import BuildToolError
from learnerkit_build.publish import referrers, registry
from learnerkit_build.scan.reports import checks_from_json


class VerifyFailed(BuildToolError):
    """What the registry holds does not match its signed statements."""


@dataclass(frozen=True)
class VerifiedAttestation:
    kind: str
    predicate_type: str
    manifest: str


@dataclass(frozen=True)
class VerifyResult:
    reference: str
    digest: str
    image_id: str
    key_id: str
    discovery: str
    attestations: list[VerifiedAttestation]
    unverified: list[str]
    """Referrer manifests that are not statements signed by the key, with why."""


def verify(
    target_registry: str, repository: str, tag: str, public_key: Path, key_setting: str | None = None
) -> VerifyResult:
    """``key_setting``: what gave ``public_key`` (an option), named by a key error."""
    where = f"{target_registry}/{repository}:{tag}"
    key = load_public_key(public_key, key_setting)
    found = registry.get_manifest(target_registry, repository, tag)
    if found is None:
        raise VerifyFailed(f"{where}: no such image in the registry")
    digest = found[1]
    _check_signature(target_registry, repository, digest, key, where)
    listed, how = referrers.discover(target_registry, repository, digest)
    statements: dict[str, tuple[dict[str, Any], str]] = {}
    unverified = []
    kinds = {predicate_type: kind for kind, predicate_type in PREDICATE_TYPES.items()}
    for referrer in listed:
        if referrer.artifact_type != referrers.DSSE:
            continue
        try:
            statement = _open(target_registry, repository, referrer, digest, key)
        except (attest.AttestationError, registry.RegistryError) as e:
            unverified.append(f"{referrer.digest}: {e}")
            continue
        kind = kinds.get(str(statement.get("predicateType")))
        if kind is not None:
            statements[kind] = (statement, referrer.digest)
    if missing := sorted(set(PREDICATE_TYPES) - set(statements) - _optional(statements)):
        why = f" ({'; '.join(unverified)})" if unverified else ""
        raise VerifyFailed(
            f"{where} ({digest}): no verified {', '.join(missing)} attestation among {len(listed)} referrers "
            f"found by {how}{why}"
        )
    image_id = _check_documents({kind: s for kind, (s, _) in statements.items()}, where)
    return VerifyResult(
        where,
        digest,
        image_id,
        key.keyid,
        how,
        [VerifiedAttestation(kind, PREDICATE_TYPES[kind], manifest) for kind, (_, manifest) in statements.items()],
        unverified,
    )


def _optional(statements: dict[str, tuple[dict[str, Any], str]]) -> set[str]:
    """The kinds an image may lack: the VEX, where the signed scan report holds no vulnerability finding (publish
    writes none then: OpenVEX needs one statement at least)."""
    scan = statements.get("scan")
    return {"vex"} if scan is not None and not vex.findings(checks_from_json(scan[0]["predicate"])) else set()


def _check_signature(host: str, repository: str, digest: str, key: Any, where: str) -> None:
    found = registry.get_manifest(host, repository, referrers.tag_schema_tag(digest) + ".sig")
    if found is None:
        raise VerifyFailed(f"{where} ({digest}): no cosign signature for this digest (unsigned, or re-tagged)")
    errors = []
    for layer in json.loads(found[0]).get("layers", []):
        payload = registry.get_blob(host, repository, layer["digest"])
        signature = (layer.get("annotations") or {}).get(referrers.COSIGN_SIGNATURE, "")
        try:
            attest.verify_simple_signing(payload, signature, key, digest, where)
        except attest.AttestationError as e:
            errors.append(str(e))
        else:
            return
    raise VerifyFailed("; ".join(errors) or f"{where}: the cosign signature manifest has no layers")


def _open(host: str, repository: str, referrer: referrers.Referrer, digest: str, key: Any) -> dict[str, Any]:
    where = f"{host}/{repository}@{referrer.digest}"
    found = registry.get_manifest(host, repository, referrer.digest)
    if found is None:
        raise attest.AttestationError(f"{where}: listed, but not in the registry")
    manifest = json.loads(found[0])
    if (manifest.get("subject") or {}).get("digest") != digest:
        raise attest.AttestationError(f"{where}: its subject is not {digest}")
    layers = [layer for layer in manifest.get("layers", []) if layer.get("mediaType") == referrers.DSSE]
    if len(layers) != 1:
        raise attest.AttestationError(f"{where}: {len(layers)} DSSE layers, not one")
    statement = attest.open_envelope(registry.get_blob(host, repository, layers[0]["digest"]), key, where)
    subjects = [s.get("digest", {}).get("sha256") for s in statement.get("subject", [])]
    if digest.removeprefix("sha256:") not in subjects:
        raise attest.AttestationError(f"{where}: the signed statement names {subjects}, not {digest}")
    annotated = (layers[0].get("annotations") or {}).get(referrers.PREDICATE_ANNOTATION)
    if annotated != statement.get("predicateType"):
        raise attest.AttestationError(f"{where}: annotated {annotated}, signed {statement.get('predicateType')}")
    return statement


def _check_documents(statements: dict[str, dict[str, Any]], where: str) -> str:
    """The image ID all documents agree on; raises naming the first document that disagrees."""
    report, sbom = statements["scan"]["predicate"], statements["sbom"]["predicate"]
    image_id = str(report.get("image_id"))
    if not report.get("passed"):
        raise VerifyFailed(f"{where}: the signed scan report of {image_id} is not a passed scan")
    if statements["test"]["predicate"].get("result") not in ("PASSED", "WARNED"):
        raise VerifyFailed(f"{where}: the signed test result is {statements['test']['predicate'].get('result')}")
    if sbom.get("metadata", {}).get("component", {}).get("version") != image_id:
        raise VerifyFailed(f"{where}: the signed SBOM is not of the scanned image {image_id}")
    checks, purls = checks_from_json(report), sbom_purls(sbom)
    if "vex" not in statements:  # only where the scan saw no vulnerability (`_optional`)
        return image_id
    if differ := vex.disagreements(checks, statements["vex"]["predicate"], purls):
        raise VerifyFailed(f"{where}: the signed VEX does not give the scan gate's verdict: {'; '.join(differ)}")
    return image_id
