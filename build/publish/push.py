"""`learnerkit image publish`: push only what was tested and scanned, with its signed attestations.

The image goes by its tested ID from the engine through a fresh layout (`learnerkit_build.publish.dirlayout`: skopeo,
gzip level 6, digests preserved), so the manifest digest published is the one a rebuild of the same image ID written
to a layout gives, whoever compresses it, and the registry's config is the image's own (its digest the image ID).
After the image: five DSSE-signed in-toto statements (SLSA provenance, CycloneDX SBOM, OpenVEX, test result,
scan report) as OCI 1.1 referrers of its digest (the referrers tag schema where the registry has no referrers
API), and cosign's `.sig` and `.att` tags; then, and only then, the publish record of the image ID
(`learnerkit_build.publish.records`). The VEX must give the gate's verdict, and Debian's security suite
must have no update the image lacks (`learnerkit_build.publish.securityupdates`), or nothing is pushed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.attestations import envelope as attest
from learnerkit_build.attestations import vex
from learnerkit_build.attestations.documents import PREDICATE_TYPES, ImageRecords, document_time, sbom_purls, statements
from learnerkit_build.attestations.key import load_or_create_signer
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.errors import BuildToolError
from learnerkit_build.imagetest.runner import CHECKS, image_test_record
from learnerkit_build.publish import dirlayout, referrers, registry
from learnerkit_build.publish.records import PublishRecord, RecordedAttestation, record_publish
from learnerkit_build.publish.securityupdates import (
    IndexSource,
    SecurityUpdates,
    SecurityUpdatesRefused,
    check_security_updates,
    image_packages,
    live_index,
    project_gate,
)
from learnerkit_build.scan.records import REPORT, load_record
from learnerkit_build.scan.reports import checks_from_json
from learnerkit_build.scan.runner import sha256_hex
from learnerkit_build.state import read_json


class PublishRefused(BuildToolError):
    """A gate of publish failed: the message says which (test, scan, VEX or security) and for which image ID."""


@dataclass(frozen=True)
class PublishedAttestation:
    kind: str
    predicate_type: str
    manifest: str


@dataclass(frozen=True)
class PublishResult:
    reference: str
    image_id: str
    pushed: str
    digest: str
    attestations: list[PublishedAttestation]
    discovery: str
    """`referrers-api` when the registry indexed the subjects, else `tag-schema`."""
    signature: str
    key_id: str
    security: SecurityUpdates
    """The security suite as publish read it, and the pending updates the gate let through (none by default)."""
    push: dirlayout.LayoutPush
    """How the image was pushed (skopeo, a fresh layout, its compression) and what the registry serves."""


def _quiet(_line: str) -> None:
    """Progress nobody asked for."""


def check_gates(reference: str) -> ImageRecords:
    """The records of an image whose test and scan passed for its exact ID (and whose documents are intact)."""
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
    sbom, report = (record.folder / "sbom.cdx.json").read_bytes(), (record.folder / REPORT).read_bytes()
    if sha256_hex(sbom) != record.sbom_sha256 or sha256_hex(report) != record.report_sha256:
        raise PublishRefused(f"scan gate: the recorded SBOM or report of {image_id} changed after the scan")
    labels = engine.image_labels(image_id)
    return ImageRecords(image_id, labels, json.loads(sbom), json.loads(report), test)


def check_vex(records: ImageRecords) -> None:
    """Refuse when the VEX of the scan would accept other evidence than the gate did."""
    checks, purls = checks_from_json(records.report), sbom_purls(records.sbom)
    document = vex.build_vex(checks, records.image_id, records.image_id, purls, document_time(records.labels))
    if differ := vex.disagreements(checks, document, purls):
        raise PublishRefused(
            f"VEX gate: the VEX of {records.image_id} would not give the scan gate's verdict: {'; '.join(differ)}"
        )


def check_security(reference: str, image_id: str, root: Path, index_source: IndexSource) -> SecurityUpdates:
    """Refuse when Debian's security suite has, now, an update the image lacks that the scan gate would block."""
    policy, allowlist = project_gate(root)
    try:
        return check_security_updates(
            reference, image_packages(image_id), policy, allowlist, datetime.now(UTC).date(), index_source
        )
    except SecurityUpdatesRefused as e:
        raise PublishRefused(f"{e} ({image_id})") from e


def publish(
    reference: str,
    repository: str,
    tag: str,
    target_registry: str,
    key_path: Path | None,
    root: Path,
    index_source: IndexSource = live_index,
    on_line: LogSink = _quiet,
) -> PublishResult:
    """Push the image ID `reference` names, once its gates pass, through a fresh layout to
    `target_registry/repository:tag`, then sign it and attach its statements; `on_line` hears each step."""
    records = check_gates(reference)
    check_vex(records)
    security = check_security(reference, records.image_id, root, index_source)
    signer = load_or_create_signer(key_path)
    remote = f"{target_registry}/{repository}"
    on_line(f"{reference} ({records.image_id}) passed the test, scan, VEX and security gates")
    source = dirlayout.daemon_source(records.image_id)
    push = dirlayout.push_fresh(source, engine.image_size(records.image_id), target_registry, repository, tag, on_line)
    if push.image.config != records.image_id:
        raise dirlayout.LayoutError(
            f"{remote}:{tag}: the registry serves config {push.image.config}, not the tested image {records.image_id}"
        )
    engine.tag_image(records.image_id, remote, tag)  # the name the engine knows it by, as `docker push` left it
    digest = push.image.manifest
    found = registry.get_manifest(target_registry, repository, digest)
    if found is None:
        raise registry.RegistryError(f"{remote}@{digest}: pushed, but the registry does not serve it")
    subject = referrers.subject_descriptor(found[0], digest)
    pushed, envelopes, indexed = [], [], True
    for kind, body in statements(records, remote, digest, root).items():
        envelope = attest.canonical(attest.sign_statement(body, signer))
        referrer, by_api = referrers.push_attestation(
            target_registry, repository, subject, envelope, PREDICATE_TYPES[kind]
        )
        indexed = indexed and by_api
        pushed.append((kind, referrer))
        envelopes.append((envelope, PREDICATE_TYPES[kind]))
    if not indexed:
        referrers.update_tag_schema(target_registry, repository, digest, [r for _, r in pushed])
    on_line(f"{len(pushed)} attestations signed and attached ({'referrers API' if indexed else 'tag schema'})")
    payload = attest.simple_signing_payload(remote, digest)
    signature = referrers.push_cosign_signature(
        target_registry, repository, digest, payload, attest.sign_bytes(payload, signer)
    )
    referrers.push_cosign_attestations(target_registry, repository, digest, envelopes)
    done = PublishResult(
        reference,
        records.image_id,
        f"{remote}:{tag}",
        digest,
        [PublishedAttestation(kind, PREDICATE_TYPES[kind], r.digest) for kind, r in pushed],
        "referrers-api" if indexed else "tag-schema",
        signature,
        signer.public_key.keyid,
        security,
        push,
    )
    record_publish(publish_record(done))
    return done


def publish_record(done: PublishResult) -> PublishRecord:
    """What this host keeps of a publish that succeeded (`learnerkit_build.publish.records`)."""
    return PublishRecord(
        done.image_id,
        done.reference,
        done.pushed,
        done.digest,
        datetime.now(UTC).isoformat(timespec="seconds"),
        done.discovery,
        done.signature,
        done.key_id,
        tuple(RecordedAttestation(a.kind, a.predicate_type, a.manifest) for a in done.attestations),
    )
