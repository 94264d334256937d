"""Scan records per image ID: the report, SBOM and SARIF as written, and their hashes, for the publish gate."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learnerkit_build.scan.reports import report_json, report_sarif
from learnerkit_build.scan.runner import ScanReport, canonical_json, sha256_hex
from learnerkit_build.state import id_file_name, read_json, state_home, write_atomic, write_json

REPORT, SBOM, SARIF = "report.json", "sbom.cdx.json", "report.sarif"


@dataclass(frozen=True)
class ScanRecord:
    image_id: str
    passed: bool
    folder: Path
    sbom_sha256: str
    report_sha256: str


def scans_home() -> Path:
    return state_home() / "image-scans"


def write_documents(report: ScanReport, folder: Path) -> dict[str, str]:
    """Write report, SBOM and SARIF into `folder`; return each file's sha256."""
    hashes = {}
    for name, payload in ((REPORT, report_json(report)), (SBOM, report.sbom), (SARIF, report_sarif(report))):
        data = canonical_json(payload)
        write_atomic(folder / name, data)
        hashes[name] = sha256_hex(data)
    return hashes


def record_scan(report: ScanReport) -> ScanRecord:
    folder = scans_home() / id_file_name(report.image_id)
    hashes = write_documents(report, folder)
    record = {
        "image_id": report.image_id,
        "reference": report.reference,
        "passed": report.passed,
        "scanned_at": report.scanned_at,
        "sha256": hashes,
    }
    write_json(scans_home() / f"{id_file_name(report.image_id)}.json", record)
    return ScanRecord(report.image_id, report.passed, folder, hashes[SBOM], hashes[REPORT])


def load_record(image_id: str) -> ScanRecord | None:
    raw: Any = read_json(scans_home() / f"{id_file_name(image_id)}.json")
    if raw is None:
        return None
    return ScanRecord(
        raw["image_id"],
        bool(raw["passed"]),
        scans_home() / id_file_name(image_id),
        raw["sha256"][SBOM],
        raw["sha256"][REPORT],
    )
