"""The statements of an image from its records: identical records identical output, whatever else this machine holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from learnerkit_build.attestations import vex
from learnerkit_build.attestations.documents import ImageRecords, image_test_predicate, statements
from learnerkit_build.scan.records import REPORT, SBOM, scans_home
from learnerkit_build.state import write_json
from tests.schemas import assert_valid_openvex

REFERENCE = "learnerkit/pytorch:2.13-cpu-py3.11"
LABELS = {"org.opencontainers.image.created": "2026-01-01T00:00:00+00:00", "io.learnerkit.framework": "pytorch"}


def report(image_id: str, cves: tuple[str, ...]) -> dict[str, Any]:
    evidence = [{"message": "openssl", "ids": ["openssl", "src:openssl", *cves], "severity": None}] if cves else []
    status = "FAIL" if cves else "PASS"
    check = {"id": "vuln.debian-security", "title": "t", "status": status, "severity": "high", "evidence": evidence}
    return {"reference": REFERENCE, "image_id": image_id, "passed": not cves, "checks": [check]}


def sbom(version: str) -> dict[str, Any]:
    purl = f"pkg:deb/debian/openssl@{version}?arch=amd64"
    return {"components": [{"name": "openssl", "version": version, "purl": purl}]}


def record(image_id: str, cves: tuple[str, ...], version: str) -> None:
    name = image_id.replace(":", "_")
    write_json(scans_home() / f"{name}.json", {"reference": REFERENCE, "image_id": image_id})
    write_json(scans_home() / name / REPORT, report(image_id, cves))
    write_json(scans_home() / name / SBOM, sbom(version))


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def test_the_vex_is_a_function_of_the_image_and_its_advisory_data_not_of_this_machines_scan_history() -> None:
    now = ImageRecords("sha256:new", LABELS, sbom("3.0.2-1"), report("sha256:new", ("CVE-2024-0009",)), {})
    digest = "sha256:" + "a" * 64
    fresh = statements(now, "127.0.0.1:5000/learnerkit/pytorch", digest, Path("/nonexistent"))["vex"]
    record("sha256:old", ("CVE-2024-0001",), "3.0.1-1")  # an earlier scan of the same reference, here only
    after = statements(now, "127.0.0.1:5000/learnerkit/pytorch", digest, Path("/nonexistent"))["vex"]
    assert after == fresh
    assert [s["vulnerability"]["name"] for s in after["predicate"]["statements"]] == ["CVE-2024-0009"]
    assert after["predicate"]["@id"].startswith(f"https://learnerkit.dev/vex/{digest}/advisories/sha256:")
    assert_valid_openvex(after["predicate"])


def test_an_image_whose_scan_saw_no_vulnerability_gets_no_vex_which_would_be_invalid_openvex() -> None:
    clean = ImageRecords("sha256:new", LABELS, sbom("3.0.2-1"), report("sha256:new", ()), {"checks": []})
    made = statements(clean, "r/x", "sha256:" + "a" * 64, Path("/nonexistent"))
    assert set(made) == {"provenance", "sbom", "test", "scan"}
    empty = vex.build_vex([], "pkg:oci/x", "sha256:" + "a" * 64, {}, "2026-01-01T00:00:00Z")
    with pytest.raises(AssertionError, match="should be non-empty"):
        assert_valid_openvex(empty)  # why: OpenVEX's schema wants one statement at least


def test_the_vex_id_records_the_advisory_data_it_was_made_from() -> None:
    digest = "sha256:" + "a" * 64
    one = ImageRecords("sha256:x", LABELS, sbom("3.0.1-1"), report("sha256:x", ("CVE-2024-0001",)), {})
    two = ImageRecords("sha256:x", LABELS, sbom("3.0.1-1"), report("sha256:x", ("CVE-2024-0002",)), {})
    ids = [statements(r, "r/x", digest, Path("/nonexistent"))["vex"]["predicate"]["@id"] for r in (one, two)]
    assert ids[0] != ids[1]
    assert all(i.startswith(f"https://learnerkit.dev/vex/{digest}/advisories/sha256:") for i in ids)


def test_identical_records_give_identical_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    now = ImageRecords("sha256:new", LABELS, sbom("3.0.1-1"), report("sha256:new", ("CVE-2024-0001",)), {})
    made = [statements(now, "r/x", "sha256:" + "a" * 64, Path("/nonexistent")) for _ in range(2)]
    assert made[0] == made[1]
    assert made[0]["vex"]["predicate"]["timestamp"] == "2026-01-01T00:00:00Z"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert statements(now, "r/x", "sha256:" + "a" * 64, Path("/nonexistent"))["vex"]["predicate"]["timestamp"] == (
        "1970-01-01T00:00:00Z"
    )


def test_a_skipped_check_is_a_warning_and_a_failure_fails() -> None:
    checks = [{"name": "smoke", "status": "skip"}, {"name": "non-root", "status": "pass"}]
    assert image_test_predicate({"checks": checks})["result"] == "WARNED"
    assert image_test_predicate({"checks": [*checks, {"name": "halt", "status": "fail"}]})["failedTests"] == ["halt"]
