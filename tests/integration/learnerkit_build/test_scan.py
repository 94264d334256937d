"""The scan gate against the real engine: a bad image with planted defects, and every learner image."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from learnerkit.cli import cli
from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.builds.images import render_image
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.scan.model import Status
from learnerkit_build.scan.policy import load_allowlist, load_policy
from learnerkit_build.scan.runner import ScanRequest, scan_image
from tests.integration.conftest import REPO

BAD_REPOSITORY = "learnerkit-test/bad-image"
CPU_IMAGES = [image for image in load_matrix(REPO).images if image.variant.accelerator == "cpu"]
PLANTED = {
    "config.root-user": None,
    "fs.setuid": "/usr/local/bin/suid-helper",
    "secrets.present": "/root/cloud-credentials",
    "secrets.deleted": "/root/.ssh/id_rsa",
    "config.secret-env": None,
    "fs.world-writable": "/shared",
    "history.apt-lists-left": None,
    "history.add-url": None,
    "config.healthcheck": None,
    "vuln.debian-security": "/var/lib/dpkg/status",
    "history.no-install-recommends": None,
}


@pytest.fixture(scope="module")
def bad_image(
    docker_client: Any, loopback_file_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """Build the bad image (BuildKit, as the build tool does); remove it afterwards."""
    ensure_base(recipe_for("debian-bookworm"), lambda line: None)
    context = tmp_path_factory.mktemp("bad-image")
    template = (Path(__file__).parent / "bad_image" / "Dockerfile.in").read_text(encoding="utf-8")
    dockerfile = template.replace("@BASE@", base_reference(recipe_for("debian-bookworm"))).replace(
        "@TOOL_URL@", loopback_file_server
    )
    (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    key = generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    (context / "planted_key.pem").write_bytes(pem)
    reference = f"{BAD_REPOSITORY}:latest"
    proc = subprocess.run(
        ["docker", "build", "--network", "host", "-t", reference, str(context)],
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield reference, context / "Dockerfile"
    for image in docker_client.images.list(name=BAD_REPOSITORY):
        docker_client.images.remove(image.id, force=True)


@pytest.mark.timeout(1200)
def test_bad_image_reports_every_planted_defect_under_its_own_id(bad_image: tuple[str, Path]) -> None:
    reference, dockerfile = bad_image
    request = ScanRequest(reference=reference, dockerfile=dockerfile.read_text(encoding="utf-8"))
    report = scan_image(request, load_policy(REPO / "scan-policy.yaml"), [])
    checks = {check.id: check for check in report.checks}
    for check_id, path in PLANTED.items():
        assert checks[check_id].status in (Status.FAIL, Status.WARN), (check_id, checks[check_id])
        if path:
            assert any(e.path == path for e in checks[check_id].evidence), (check_id, checks[check_id].evidence)
    assert "secret:aws-access-key-id" in checks["secrets.present"].evidence[0].ids
    assert "secret:private-key" in checks["secrets.deleted"].evidence[0].ids
    assert any("127.0.0.1" in (e.history or "") for e in checks["history.add-url"].evidence)
    assert checks["dockerfile.hadolint"].status is Status.FAIL
    assert not report.passed
    blocked = {b.check for b in report.gate.blockers}
    assert {"config.root-user", "fs.setuid", "secrets.present", "secrets.deleted", "vuln.debian-security"} <= blocked


def test_scan_cli_exits_non_zero_with_json_and_sarif(bad_image: tuple[str, Path], tmp_path: Path) -> None:
    reference, dockerfile = bad_image
    sarif = tmp_path / "scan.sarif"
    result = CliRunner().invoke(
        cli,
        [
            "image",
            "scan",
            "--image",
            reference,
            "--dockerfile",
            str(dockerfile),
            "--no-debian-security",
            "--sarif",
            str(sarif),
            "--report-dir",
            str(tmp_path / "reports"),
            "-o",
            "json",
            "--root",
            str(REPO),
        ],
    )
    assert result.exit_code == 1, result.output
    [report] = json.loads(result.output)
    assert report["passed"] is False
    log = json.loads(sarif.read_text(encoding="utf-8"))
    assert log["version"] == "2.1.0"
    assert {r["ruleId"] for r in log["runs"][0]["results"]} >= {"fs.setuid", "secrets.deleted"}
    sbom = json.loads(
        (tmp_path / "reports" / reference.replace("/", "_").replace(":", "_") / "sbom.cdx.json").read_text(
            encoding="utf-8"
        )
    )
    assert sbom["specVersion"] == "1.6"


RELOCK = (
    "Debian published security updates for packages the locks hold after they were made: the gate is right to block "
    "the images. Move the base and every lock to them (docs/supply-chain.md, The base): remove "
    "learner_base/lock/debian-bookworm.json, then `learnerkit image base --rebuild`, `learnerkit image lock --base "
    "--sidecar --all`, `make images`, and commit the locks"
)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("image", CPU_IMAGES, ids=lambda image: image.name)
def test_learner_image_passes_the_gate(image: Any, docker_client: Any) -> None:
    reference = f"{image.repository()}:{image.tag}"
    inputs = BuildInputs()
    request = ScanRequest(
        reference=reference,
        spec=image.name,
        dockerfile=render_image(REPO, image, inputs),
        hadolint_config=REPO / ".hadolint.yaml",
    )
    report = scan_image(request, load_policy(REPO / "scan-policy.yaml"), load_allowlist(REPO / "scan-allowlist.yaml"))
    outdated = any(blocker.check == "vuln.debian-security" for blocker in report.gate.blockers)
    assert report.passed, (report.gate.blockers, RELOCK if outdated else "")
    statuses = {check.id: check.status for check in report.checks}
    assert statuses["vuln.debian-security"] is Status.PASS
    assert statuses["vuln.osv"] is Status.UNKNOWN
    names = {component["name"] for component in report.sbom["components"]}
    assert {"python3.11", "tini"} <= names
