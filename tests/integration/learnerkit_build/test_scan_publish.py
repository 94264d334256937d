"""Publish and verify against a real registry (Debian's docker-registry on 127.0.0.1), end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from learnerkit_build import publish as publishing
from learnerkit_build.imagetest import CHECKS, image_test_record, run_image_tests
from learnerkit_build.matrix import load_matrix
from learnerkit_build.publish import PublishRefused, VerifyFailed, attach, check_gates, publish, verify
from learnerkit_build.registry import get_blob, get_manifest
from learnerkit_build.scan.policy import Policy, load_allowlist, load_policy
from learnerkit_build.scan.records import record_scan
from learnerkit_build.scan.runner import ScanRequest, scan_image
from learnerkit_build.state import read_json
from tests.integration.conftest import REPO

REPOSITORY, TAG = "learnerkit-test/published", "1"


def smallest_cpu_image(docker_client: Any) -> Any:
    images = [i for i in load_matrix(REPO).images if i.variant.accelerator == "cpu"]
    return min(images, key=lambda i: docker_client.images.get(f"{i.repository()}:{i.tag}").attrs["Size"])


def scan_and_record(reference: str, policy: Policy) -> bool:
    report = scan_image(ScanRequest(reference=reference), policy, load_allowlist(REPO / "scan-allowlist.yaml"))
    record_scan(report)
    return report.passed


@pytest.mark.timeout(3600)
def test_publish_gates_and_verify(
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
            publish(local, REPOSITORY, TAG, registry, None)

        assert not scan_and_record(local, Policy(unknown_fails=("*",)))
        with pytest.raises(PublishRefused, match=r"scan gate: the scan of .* failed"):
            publish(local, REPOSITORY, TAG, registry, None)

        assert scan_and_record(local, load_policy(REPO / "scan-policy.yaml"))
        done = publish(local, REPOSITORY, TAG, registry, None)
        public_key = tmp_path / "home" / "signing" / "ed25519.pub"
        verified = verify(registry, REPOSITORY, TAG, public_key)
        assert (verified.digest, verified.image_id) == (done.digest, image_id)

        # A tampered SBOM: the attestation is re-pushed with one changed byte; the signature still names the old.
        manifest = json.loads(get_manifest(registry, REPOSITORY, publishing.attestation_tag(done.digest))[0])
        blobs = {
            layer["annotations"]["org.opencontainers.image.title"]: get_blob(registry, REPOSITORY, layer["digest"])
            for layer in manifest["layers"]
        }
        blobs["sbom"] = blobs["sbom"].replace(b'"CycloneDX"', b'"CycloneDX" ', 1)
        attach(registry, REPOSITORY, done.digest, blobs)
        with pytest.raises(VerifyFailed, match="sbom in the registry differs"):
            verify(registry, REPOSITORY, TAG, public_key)

        # A re-tagged image: another image pushed under the published tag has no attestation.
        other = f"{registry}/{REPOSITORY}"
        docker_client.images.get("learnerkit/base:debian-bookworm").tag(other, TAG)
        docker_client.images.push(other, TAG)
        with pytest.raises(VerifyFailed, match="no attestation for this digest"):
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
