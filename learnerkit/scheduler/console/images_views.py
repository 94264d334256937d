"""The Images view's data: the learner image matrix as the build tool reads it (`load_matrix`, the frameworks'
framework.yaml), and for each image what this host's engine and the build tool's records say: built (its image
ID), the scan gate's verdict and findings, the image tests, whether its base moved since it was built
(`learnerkit image outdated`'s base check), and its publish state from `learnerkit image publish`'s record (no
registry is asked). Read-only: nothing here builds, scans or publishes.

The documents an image's page offers are the build tool's own: the scan's recorded report, SBOM and SARIF, the
test record, and the in-toto statements `learnerkit image publish` would sign about the image (SLSA provenance,
SBOM, OpenVEX, test result, scan report), made by the same function (`statements`) over the same records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from learnerkit.common import engineimages
from learnerkit.common.project import find_project_root
from learnerkit_build.attestations.documents import ImageRecords, statements
from learnerkit_build.imagetest.runner import image_test_record
from learnerkit_build.publish.records import PublishState, publish_state
from learnerkit_build.recipes.matrix import Matrix, load_matrix
from learnerkit_build.recipes.spec import ImageSpec
from learnerkit_build.scan.outdated import base_reasons
from learnerkit_build.scan.records import REPORT, SARIF, SBOM, load_record
from learnerkit_build.state import read_json

RECORDS = {"report": REPORT, "sbom": SBOM, "sarif": SARIF}
"""The scan's recorded documents an image's page offers, by the name in its address."""
STATEMENTS = ("provenance", "sbom", "vex", "test", "scan")
"""The statements publish signs, by kind (docs/supply-chain.md)."""
NOT_PUBLISHED = PublishState("not published", None)


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str
    status: str
    title: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScanView:
    passed: bool
    scanned_at: str
    counts: dict[str, int]
    blockers: tuple[str, ...]
    findings: tuple[Finding, ...]
    """Every check that did not pass (FAIL, WARN, UNKNOWN), most severe first."""
    components: int
    """Packages in the SBOM."""


@dataclass(frozen=True)
class TestView:
    passed: bool
    checks: tuple[tuple[str, str, str], ...]
    """(name, pass | fail | skip, detail)."""


@dataclass(frozen=True)
class ImageView:
    spec: str
    """``pytorch:2.13-cpu``: the image's address in the console."""
    framework: str
    version: str
    variant: str
    python: str
    reference: str
    image_id: str | None = None
    """None: not built on this engine (or the engine did not answer: ``engine_problem``)."""
    engine_problem: str = ""
    scan: ScanView | None = None
    tests: TestView | None = None
    outdated: tuple[str, ...] = ()
    """Why it is outdated (its base moved); empty when it is not, or not built."""
    documents: tuple[str, ...] = ()
    """The scan records present (keys of ``RECORDS``)."""
    publish: PublishState = NOT_PUBLISHED

    @property
    def verdict(self) -> str:
        if self.image_id is None:
            return "not built"
        if self.scan is None:
            return "not scanned"
        return "passed" if self.scan.passed else "failed"


@cache
def matrix(root: Path | None = None) -> Matrix:
    """The matrix of the project the scheduler serves (read once: framework.yaml changes with a release)."""
    return load_matrix(root or find_project_root())


def image_views(images: tuple[ImageSpec, ...]) -> list[ImageView]:
    """Every image of the matrix with what this host knows of it, framework, version then variant."""
    ordered = sorted(images, key=lambda i: (i.framework.name, i.version, i.variant_name))
    return [image_view(image) for image in ordered]


def image_view(image: ImageSpec) -> ImageView:
    reference = f"{image.repository()}:{image.tag}"
    plain = ImageView(image.name, image.framework.name, image.version, image.variant_name, image.python, reference)
    try:
        image_id = engineimages.image_id(reference)
    except engineimages.EngineError as e:
        return replace(plain, engine_problem=str(e), publish=publish_state(reference, None))
    if image_id is None:
        return replace(plain, publish=publish_state(reference, None))
    record = load_record(image_id)
    scan = _scan(record.folder / REPORT) if record is not None else None
    documents = tuple(k for k, name in RECORDS.items() if record is not None and (record.folder / name).is_file())
    test: Any = read_json(image_test_record(image_id))
    tests = None
    if isinstance(test, dict):
        checks = tuple((str(c["name"]), str(c["status"]), str(c.get("detail", ""))) for c in test.get("checks", []))
        tests = TestView(bool(test.get("passed")), checks)
    outdated = tuple(base_reasons(reference))
    publish = publish_state(reference, image_id)
    return replace(
        plain, image_id=image_id, scan=scan, tests=tests, outdated=outdated, documents=documents, publish=publish
    )


SEVERITY_ORDER = {"critical": 0, "high": 1, "medium": 2, "low": 3}
STATUS_ORDER = {"FAIL": 0, "UNKNOWN": 1, "WARN": 2}


def _scan(path: Path) -> ScanView | None:
    if not path.is_file():
        return None
    report = json.loads(path.read_bytes())
    findings = [
        Finding(
            str(check["id"]),
            str(check.get("severity", "")),
            str(check["status"]),
            str(check.get("title", "")),
            tuple(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in check.get("evidence", [])),
        )
        for check in report.get("checks", [])
        if check.get("status") != "PASS"
    ]
    findings.sort(key=lambda f: (STATUS_ORDER.get(f.status, 9), SEVERITY_ORDER.get(f.severity, 9), f.check))
    gate = report.get("gate", {})
    return ScanView(
        passed=bool(report.get("passed")),
        scanned_at=str(report.get("scanned_at", "")),
        counts={str(k): int(v) for k, v in report.get("counts", {}).items()},
        blockers=tuple(str(b) for b in gate.get("blockers", [])),
        findings=tuple(findings),
        components=int(report.get("sbom_components", 0)),
    )


def record_file(image_id: str, document: str) -> Path | None:
    """One of the scan's recorded documents of the image ID; None when it has none."""
    record = load_record(image_id)
    if record is None or document not in RECORDS:
        return None
    path = record.folder / RECORDS[document]
    return path if path.is_file() else None


def statements_of(view: ImageView, root: Path | None = None) -> dict[str, dict[str, Any]]:
    """Kind -> the in-toto statement `image publish` would sign about the image, subject its image ID (publish
    names the registry digest); none where its gates' records are missing (never tested or scanned), and no
    ``vex`` where the scan saw no vulnerability (publish attaches none then)."""
    if view.image_id is None:
        return {}
    record = load_record(view.image_id)
    test: Any = read_json(image_test_record(view.image_id))
    if record is None or not isinstance(test, dict):
        return {}
    records = ImageRecords(
        view.image_id,
        engineimages.image_labels(view.image_id),
        json.loads((record.folder / SBOM).read_bytes()),
        json.loads((record.folder / REPORT).read_bytes()),
        test,
    )
    return statements(records, view.reference.rsplit(":", 1)[0], view.image_id, root or find_project_root())
