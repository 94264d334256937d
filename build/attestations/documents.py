"""The five signed documents of a published image, each an in-toto Statement v1 about its registry digest.

SLSA provenance v1, the CycloneDX SBOM, OpenVEX, the image-test result (in-toto test-result v0.1) and the scan
report, all made from the records the test and scan gates kept. Nothing reads a clock: times come from
SOURCE_DATE_EPOCH or the build, serials from digests, so identical images and records give identical statements.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from learnerkit_build.attestations import slsa as provenance
from learnerkit_build.attestations import vex
from learnerkit_build.attestations.envelope import statement
from learnerkit_build.scan.reports import checks_from_json
from learnerkit_build.scan.sbom import all_components

TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
SCAN_REPORT_TYPE = "https://learnerkit.dev/attestations/scan-report/v1"
CYCLONEDX_TYPE = "https://cyclonedx.org/bom"
PREDICATE_TYPES = {
    "provenance": provenance.PREDICATE_TYPE,
    "sbom": CYCLONEDX_TYPE,
    "vex": vex.PREDICATE_TYPE,
    "test": TEST_RESULT_TYPE,
    "scan": SCAN_REPORT_TYPE,
}
IMAGE_TESTS_URI = "https://learnerkit.dev/docs/build-tool#image-tests"


@dataclass(frozen=True)
class ImageRecords:
    """What the gates recorded about one image ID, and its labels."""

    image_id: str
    labels: dict[str, str]
    sbom: dict[str, Any]
    report: dict[str, Any]
    test: dict[str, Any]


def image_purl(remote: str, digest: str) -> str:
    """purl of an image in a registry: `pkg:oci/NAME@sha256%3A...?repository_url=HOST/REPO`."""
    name = remote.rsplit("/", 1)[-1]
    return f"pkg:oci/{name}@{quote(digest, safe='')}?repository_url={quote(remote, safe='/')}"


def sbom_purls(sbom: dict[str, Any]) -> dict[str, str]:
    """Package name to purl; the first component of a name wins (a name in two places is rare)."""
    purls: dict[str, str] = {}
    for component in all_components(sbom):
        if component.get("purl"):
            purls.setdefault(str(component["name"]), str(component["purl"]))
    return purls


def document_time(labels: dict[str, str]) -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        return datetime.fromtimestamp(int(epoch), UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return labels.get("org.opencontainers.image.created", "1970-01-01T00:00:00+00:00").replace("+00:00", "Z")


def image_test_predicate(test: dict[str, Any]) -> dict[str, Any]:
    by_status: dict[str, list[str]] = {"pass": [], "skip": [], "fail": []}
    for check in test.get("checks", []):
        by_status.setdefault(str(check["status"]), []).append(str(check["name"]))
    result = "FAILED" if by_status["fail"] else "WARNED" if by_status["skip"] else "PASSED"
    return {
        "result": result,
        "configuration": [{"name": "learnerkit image test", "uri": IMAGE_TESTS_URI}],
        "passedTests": sorted(by_status["pass"]),
        "warnedTests": sorted(by_status["skip"]),
        "failedTests": sorted(by_status["fail"]),
    }


def vex_document(records: ImageRecords, remote: str, digest: str) -> dict[str, Any]:
    checks = checks_from_json(records.report)
    product = image_purl(remote, digest)
    time = document_time(records.labels)
    return vex.build_vex(checks, product, digest, sbom_purls(records.sbom), time)


def statements(records: ImageRecords, remote: str, digest: str, root: Path) -> dict[str, dict[str, Any]]:
    """Kind (provenance, sbom, vex, test, scan) to its statement about `remote@digest`; no vex when the scan saw no
    vulnerability (an OpenVEX document holds one statement at least)."""
    framework = records.labels.get("io.learnerkit.framework", "")
    commit = records.labels.get(provenance.REVISION_LABEL, "").removesuffix("-dirty")
    folders = ["learner_base"] + ([f"frameworks/{framework}"] if framework else [])
    predicates = {
        "provenance": provenance.provenance(
            records.labels, provenance.source_files(root, commit, folders), records.sbom
        ),
        "sbom": records.sbom,
        "vex": vex_document(records, remote, digest),
        "test": image_test_predicate(records.test),
        "scan": records.report,
    }
    if not predicates["vex"]["statements"]:
        del predicates["vex"]  # OpenVEX needs one statement at least: no finding, nothing to say, no document
    return {kind: statement(remote, digest, PREDICATE_TYPES[kind], predicates[kind]) for kind in predicates}
