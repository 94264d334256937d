"""Publish and verify against a real registry (Debian's docker-registry on 127.0.0.1), end to end, with the
attestations checked by the standard tools (securesystemslib, in-toto, in-toto-attestation)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format
from in_toto.models.metadata import Metadata
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from learnerkit.cli import cli
from learnerkit_build.attestations.envelope import canonical
from learnerkit_build.attestations.key import default_key_path, public_key_path
from learnerkit_build.attestations.vex import findings as vex_findings
from learnerkit_build.imagetest.runner import CHECKS, image_test_record, run_image_tests
from learnerkit_build.publish import dirlayout, referrers
from learnerkit_build.publish.push import PublishRefused, PublishResult, check_gates, publish
from learnerkit_build.publish.records import load_publish_record
from learnerkit_build.publish.registry import get_blob, get_manifest
from learnerkit_build.publish.securityupdates import image_packages
from learnerkit_build.publish.verify import VerifyFailed, verify
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.scan.debian_security import IndexEntry, SuiteIndex
from learnerkit_build.scan.policy import Policy, load_allowlist, load_policy
from learnerkit_build.scan.records import record_scan
from learnerkit_build.scan.reports import checks_from_json
from learnerkit_build.scan.runner import ScanRequest, scan_image
from learnerkit_build.scan.sbom import validate_sbom
from learnerkit_build.state import read_json
from tests.integration.conftest import REPO
from tests.schemas import assert_valid_openvex

REPOSITORY, TAG = "learnerkit-test/published", "1"
OPENVEX, CYCLONEDX = "https://openvex.dev/ns", "https://cyclonedx.org/bom"
SCAN_REPORT = "https://learnerkit.dev/attestations/scan-report/v1"
KINDS = {
    "https://slsa.dev/provenance/v1",
    CYCLONEDX,
    OPENVEX,
    "https://in-toto.io/attestation/test-result/v0.1",
    SCAN_REPORT,
}


def smallest_cpu_image(docker_client: Any) -> Any:
    images = [i for i in load_matrix(REPO).images if i.variant.accelerator == "cpu"]
    return min(images, key=lambda i: docker_client.images.get(f"{i.repository()}:{i.tag}").attrs["Size"])


def scan_and_record(reference: str, policy: Policy) -> bool:
    request = ScanRequest(reference=reference, project=REPO)  # the image's committed lock: the SBOM's hashes
    report = scan_image(request, policy, load_allowlist(REPO / "scan-allowlist.yaml"))
    record_scan(report)
    return report.passed


def index_with_one_update(reference: str) -> SuiteIndex:
    """A security index that has a newer version of the image's first package than the image holds."""
    image = image_packages(reference)
    first = image.packages[0]
    entry = IndexEntry(first.name, f"{first.version}+sec1", first.architecture, first.source, "pool/x.deb", "0", 1)
    return SuiteIndex(
        "bookworm-security",
        "http://127.0.0.1/nowhere",
        datetime.now(UTC),
        None,
        {(first.name, first.architecture): entry},
    )


def referred_envelopes(registry: str, digest: str) -> dict[str, tuple[str, bytes]]:
    """Predicate type to (manifest digest, envelope), read from the tag schema's index with plain HTTP."""
    index = requests.get(
        f"http://{registry}/v2/{REPOSITORY}/manifests/{digest.replace(':', '-')}",
        headers={"Accept": "application/vnd.oci.image.index.v1+json"},
        timeout=30,
    ).json()
    found = {}
    for entry in index["manifests"]:
        manifest = json.loads(get_manifest(registry, REPOSITORY, entry["digest"])[0])
        assert manifest["subject"]["digest"] == digest
        assert manifest["artifactType"] == entry["artifactType"] == "application/vnd.dsse.envelope.v1+json"
        [layer] = manifest["layers"]
        found[entry["annotations"]["in-toto.io/predicate-type"]] = (
            entry["digest"],
            get_blob(registry, REPOSITORY, layer["digest"]),
        )
    return found


def check_with_standard_tools(envelope: bytes, public_pem: str, digest: str) -> dict[str, Any]:
    """Verify with securesystemslib and in-toto given only the public key; validate with in-toto-attestation."""
    key = SSlibKey.from_crypto(serialization.load_pem_public_key(public_pem.encode()))
    data = json.loads(envelope)
    assert Envelope.from_dict(json.loads(envelope)).verify([key], 1)
    Metadata.from_dict(data).verify_signature({**key.to_dict(), "keyid": key.keyid})
    statement = json.loads(base64.b64decode(data["payload"]))
    Statement.copy_from_pb(json_format.ParseDict(statement, statement_pb2.Statement())).validate()
    assert statement["subject"][0]["digest"] == {"sha256": digest.removeprefix("sha256:")}
    return dict(statement)


def assert_published_digest_is_the_layouts(registry: str, done: PublishResult, image_id: str, scratch: Path) -> None:
    """The published manifest digest is the one anyone gets writing the same image ID to a fresh layout, by the
    commands docs/supply-chain.md gives; the registry serves a Docker schema 2 manifest whose config is the
    image itself (the digest is the image ID) and that `skopeo inspect` names by that digest."""
    skopeo = dirlayout.skopeo_exe()
    scratch.mkdir()
    gzip_6 = ["--dest-compress", "--dest-compress-format", "gzip", "--dest-compress-level", "6"]
    copy = ["copy", "--quiet", *gzip_6, f"docker-daemon:{image_id}", f"dir:{scratch / 'layout'}"]
    subprocess.run([skopeo, "--tmpdir", str(scratch), *copy], check=True, timeout=900)
    written = "sha256:" + hashlib.sha256((scratch / "layout" / "manifest.json").read_bytes()).hexdigest()
    assert done.digest == done.push.image.manifest == written
    inspected = subprocess.run(
        [skopeo, "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{registry}/{REPOSITORY}:{TAG}"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert inspected.stdout.strip() == done.digest
    manifest = json.loads(get_manifest(registry, REPOSITORY, done.digest)[0])
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert manifest["config"]["digest"] == done.push.image.config == image_id
    assert (done.push.method, done.push.compression) == ("skopeo-dir-layout", "gzip, level 6")
    version = subprocess.run([skopeo, "--version"], check=True, capture_output=True, text=True, timeout=60)
    assert done.push.skopeo == version.stdout.split()[-1]


@pytest.mark.timeout(3600)
def test_publish_gates_attest_and_verify(
    docker_client: Any, registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = smallest_cpu_image(docker_client)
    reference = f"{image.repository()}:{image.tag}"
    image_id = docker_client.images.get(reference).id
    record = read_json(image_test_record(image_id))
    if not (record and record["passed"] and set(CHECKS) <= {c["name"] for c in record["checks"]}):
        [report] = run_image_tests(REPO, [image], [], verbose=False)
        assert report.passed, report.checks
    tested = image_test_record(image_id)
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "image-tests").mkdir(parents=True)
    shutil.copy(tested, image_test_record(image_id))
    docker_client.images.get(image_id).tag(REPOSITORY, TAG)
    local = f"{REPOSITORY}:{TAG}"
    try:
        with pytest.raises(PublishRefused, match=r"scan gate: .* never scanned"):
            publish(local, REPOSITORY, TAG, registry, None, REPO)

        assert not scan_and_record(local, Policy(unknown_fails=("*",)))
        with pytest.raises(PublishRefused, match=r"scan gate: the scan of .* failed"):
            publish(local, REPOSITORY, TAG, registry, None, REPO)

        assert scan_and_record(local, load_policy(REPO / "scan-policy.yaml"))
        lacking = index_with_one_update(local)
        with pytest.raises(PublishRefused, match=r"security gate: 1 Debian security update\(s\) available but not"):
            publish(local, REPOSITORY, TAG, registry, None, REPO, index_source=lambda _suite, _arch: lacking)
        assert get_manifest(registry, REPOSITORY, TAG) is None
        assert load_publish_record(image_id) is None, "a refused publish is not recorded"
        done = publish(local, REPOSITORY, TAG, registry, None, REPO)
        assert_published_digest_is_the_layouts(registry, done, image_id, tmp_path / "rebuilt")
        kept = load_publish_record(image_id)
        assert kept is not None and kept.pinned == f"{registry}/{REPOSITORY}:{TAG}@{done.digest}"
        assert kept.key_id == done.key_id and {a.manifest for a in kept.attestations} == {
            a.manifest for a in done.attestations
        }
        assert done.security.suite == "bookworm-security"
        assert done.security.checked > 50
        assert done.security.pending == []
        public_key = public_key_path(default_key_path())
        public_pem = public_key.read_text(encoding="utf-8")

        # Debian's registry (distribution 2.8) has no referrers API: the tag schema carries the referrers.
        api = requests.get(f"http://{registry}/v2/{REPOSITORY}/referrers/{done.digest}", timeout=30)
        assert api.status_code == 404
        assert done.discovery == "tag-schema"
        envelopes = referred_envelopes(registry, done.digest)
        statements = {
            kind: check_with_standard_tools(env, public_pem, done.digest) for kind, (_, env) in envelopes.items()
        }
        # A VEX exactly where the scan saw a vulnerability: OpenVEX needs one statement at least.
        found = vex_findings(checks_from_json(statements[SCAN_REPORT]["predicate"]))
        expected = KINDS if found else KINDS - {OPENVEX}
        assert set(envelopes) == expected
        provenance = statements["https://slsa.dev/provenance/v1"]["predicate"]
        json_format.ParseDict(provenance, provenance_pb2.Provenance())
        dependencies = provenance["buildDefinition"]["resolvedDependencies"]
        labels = docker_client.images.get(image_id).labels
        commit = labels["org.opencontainers.image.revision"].removesuffix("-dirty")
        assert {"gitCommit": commit} in [d.get("digest") for d in dependencies]
        assert any(d["name"] == "learner_base/Dockerfile.j2" and "gitBlob" in d["digest"] for d in dependencies)
        assert any(d.get("uri", "").startswith("pkg:deb/debian/libc6@") for d in dependencies)
        base = labels["org.opencontainers.image.base.digest"].removeprefix("sha256:")
        assert {"sha256": base} in [d.get("digest") for d in dependencies]
        packages = [d for d in dependencies if d.get("uri", "").startswith("pkg:")]
        assert packages and all("sha256" in d.get("digest", {}) for d in packages), "every package by digest"
        sbom = statements[CYCLONEDX]["predicate"]
        validate_sbom(sbom)  # cyclonedx-python-lib's validator, its bundled CycloneDX 1.6 schema
        assert all(c.get("hashes") for c in sbom["components"] if "purl" in c)
        assert sbom["dependencies"]
        if found:
            vex = statements[OPENVEX]["predicate"]
            assert vex["@id"].startswith(f"https://learnerkit.dev/vex/{done.digest}/advisories/sha256:")
            assert_valid_openvex(vex)
        test = statements["https://in-toto.io/attestation/test-result/v0.1"]["predicate"]
        json_format.ParseDict(test, test_result_pb2.TestResult())
        assert set(test["passedTests"]) | set(test["warnedTests"]) == set(CHECKS)

        verified = verify(registry, REPOSITORY, TAG, public_key)
        assert (verified.digest, verified.image_id, verified.discovery) == (done.digest, image_id, "tag-schema")
        assert {a.predicate_type for a in verified.attestations} == expected
        shown = CliRunner().invoke(cli, ["image", "verify", f"{registry}/{REPOSITORY}:{TAG}", "--output", "json"])
        assert shown.exit_code == 0, shown.output
        as_json = json.loads(shown.output)
        assert (as_json["digest"], as_json["discovery"]) == (done.digest, "tag-schema")
        assert {a["predicate_type"] for a in as_json["attestations"]} == expected

        # cosign's layout: a simple-signing signature that the public key verifies over the payload it names,
        # and one DSSE layer per statement under `.att`.
        signature = json.loads(get_manifest(registry, REPOSITORY, done.digest.replace(":", "-") + ".sig")[0])
        [layer] = signature["layers"]
        assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
        payload = get_blob(registry, REPOSITORY, layer["digest"])
        assert json.loads(payload)["critical"]["image"]["docker-manifest-digest"] == done.digest
        pem_key = serialization.load_pem_public_key(public_pem.encode())
        assert isinstance(pem_key, ec.EllipticCurvePublicKey)
        pem_key.verify(
            base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"]),
            payload,
            ec.ECDSA(hashes.SHA256()),
        )
        att = json.loads(get_manifest(registry, REPOSITORY, done.digest.replace(":", "-") + ".att")[0])
        assert {entry["mediaType"] for entry in att["layers"]} == {"application/vnd.dsse.envelope.v1+json"}
        assert {entry["annotations"]["predicateType"] for entry in att["layers"]} == expected

        # Identical image and records: identical statements on a second publish (signatures differ: ECDSA).
        again = publish(local, REPOSITORY, TAG, registry, None, REPO)
        assert again.digest == done.digest
        second = {
            kind: check_with_standard_tools(env, public_pem, done.digest)
            for kind, (_, env) in referred_envelopes(registry, done.digest).items()
        }
        assert second == statements

        # A tampered SBOM: its manifest in the tag schema now holds a changed payload under the old signature.
        manifest_digest, envelope = referred_envelopes(registry, done.digest)[CYCLONEDX]
        forged = json.loads(envelope)
        bom = json.loads(base64.b64decode(forged["payload"]))
        bom["predicate"]["components"].append({"type": "library", "name": "backdoor", "version": "1"})
        forged["payload"] = base64.b64encode(canonical(bom)).decode()
        subject = referrers.subject_descriptor(*get_manifest(registry, REPOSITORY, done.digest))
        referrer, _ = referrers.push_attestation(registry, REPOSITORY, subject, canonical(forged), CYCLONEDX)
        referrers.update_tag_schema(registry, REPOSITORY, done.digest, [referrer])
        assert referrer.digest != manifest_digest
        with pytest.raises(VerifyFailed, match=r"no verified sbom attestation .* tag-schema"):
            verify(registry, REPOSITORY, TAG, public_key)

        # A re-tagged image: another image pushed under the published tag has no signature.
        other = f"{registry}/{REPOSITORY}"
        docker_client.images.get("learnerkit/base:debian-bookworm").tag(other, TAG)
        docker_client.images.push(other, TAG)
        with pytest.raises(VerifyFailed, match="no cosign signature for this digest"):
            verify(registry, REPOSITORY, TAG, public_key)

        # A changed image: the local tag now names a new image ID that was never tested or scanned.
        context = tmp_path / "changed"
        context.mkdir()
        (context / "Dockerfile").write_text(f"FROM {image_id}\nLABEL io.learnerkit.test.changed=1\n", encoding="utf-8")
        subprocess.run(
            ["docker", "build", "-q", "-t", local, str(context)], check=True, capture_output=True, timeout=300
        )
        with pytest.raises(PublishRefused, match=r"test gate: .* never tested"):
            check_gates(local)
    finally:
        for repository in (REPOSITORY, f"{registry}/{REPOSITORY}"):
            for tagged in docker_client.images.list(name=repository):
                for tag in tagged.tags:
                    if tag.startswith(repository + ":"):
                        docker_client.images.remove(tag, force=False, noprune=False)
        # The digest references `docker push` records on the pushed images (the re-tagged base's) go too.
        for pushed in docker_client.images.list():
            for reference in pushed.attrs.get("RepoDigests") or []:
                if reference.startswith(f"{registry}/{REPOSITORY}@"):
                    docker_client.images.remove(reference, force=False, noprune=False)
