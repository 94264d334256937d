"""Scan reports: a rich table for people, JSON for machines, SARIF 2.1.0 for code-scanning tools."""

from __future__ import annotations

from importlib.metadata import version as dist_version
from typing import Any

from rich.table import Table

from learnerkit.common.output import to_jsonable
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status
from learnerkit_build.scan.runner import ScanReport
from learnerkit_build.scan.sbom import all_components

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_LEVELS = {Status.FAIL: "error", Status.WARN: "warning", Status.UNKNOWN: "note", Status.PASS: "none"}
STYLE = {Status.PASS: "green", Status.FAIL: "red", Status.WARN: "yellow", Status.UNKNOWN: "magenta"}


def report_json(report: ScanReport) -> dict[str, Any]:
    """The report without the SBOM (it is a document of its own), with counts by status."""
    counts: dict[str, int] = {}
    for check in report.checks:
        counts[check.status.value] = counts.get(check.status.value, 0) + 1
    return {
        "reference": report.reference,
        "spec": report.spec,
        "image_id": report.image_id,
        "scanned_at": report.scanned_at,
        "seconds": report.seconds,
        "archive_bytes": report.archive_bytes,
        "passed": report.passed,
        "counts": counts,
        "gate": to_jsonable(report.gate),
        "checks": [_check_json(check) for check in report.checks],
        "sbom_components": sum(1 for _ in all_components(report.sbom)),
    }


def checks_from_json(report: dict[str, Any]) -> list[CheckResult]:
    """The checks of a recorded report.json, as the gate saw them (allowlist markings included)."""
    checks = []
    for raw in report.get("checks", []):
        evidence = [
            Evidence(
                message=str(item["message"]),
                path=item.get("path"),
                layer=item.get("layer"),
                history=item.get("history"),
                ids=tuple(item.get("ids") or ()),
                allowed_by=item.get("allowed_by"),
                justification=item.get("justification"),
                severity=Severity.parse(item["severity"]) if item.get("severity") else None,
            )
            for item in raw.get("evidence", [])
        ]
        checks.append(
            CheckResult(raw["id"], raw["title"], Status(raw["status"]), Severity.parse(raw["severity"]), evidence)
        )
    return checks


def _check_json(check: CheckResult) -> dict[str, Any]:
    data = to_jsonable(check)
    data["severity"] = check.severity.label()
    for item, raw in zip(check.evidence, data["evidence"], strict=True):
        raw["severity"] = item.severity.label() if item.severity is not None else None
    return dict(data)


def _status_label(check: CheckResult) -> str:
    open_items = [e for e in check.evidence if not e.allowed_by]
    if check.status in (Status.FAIL, Status.WARN) and check.evidence and not open_items:
        return "[cyan]ALLOWED[/]"
    return f"[{STYLE[check.status]}]{check.status.value}[/]"


def report_table(report: ScanReport) -> Table:
    verdict = "[green]passed[/]" if report.passed else "[red]FAILED[/]"
    table = Table(
        title=f"{report.reference} ({report.image_id[:19]}): gate {verdict}, threshold "
        f"{report.gate.threshold}, {report.seconds:.1f}s",
        title_justify="left",
    )
    for column in ("check", "status", "severity", "evidence"):
        table.add_column(column, overflow="fold")
    for check in report.checks:
        lines = []
        for item in check.evidence[:5]:
            where = " ".join(filter(None, [item.path, f"layer {item.layer}" if item.layer is not None else None]))
            allowed = f" [cyan](allowed: {item.allowed_by})[/]" if item.allowed_by else ""
            lines.append(f"{item.message}" + (f" [dim]{where}[/]" if where else "") + allowed)
        if len(check.evidence) > 5:
            lines.append(f"[dim]... {len(check.evidence) - 5} more (--output json)[/]")
        table.add_row(check.id, _status_label(check), check.severity.label(), "\n".join(lines))
    return table


def report_sarif(report: ScanReport) -> dict[str, Any]:
    rules = [
        {
            "id": check.id,
            "shortDescription": {"text": check.title},
            "properties": {"security-severity": _security_severity(check.severity)},
        }
        for check in report.checks
    ]
    results = []
    for number, check in enumerate(report.checks):
        if check.status is Status.PASS:
            continue
        for item in check.evidence:
            entry: dict[str, Any] = {
                "ruleId": check.id,
                "ruleIndex": number,
                "level": SARIF_LEVELS[check.status],
                "message": {"text": item.message + (f" (history: {item.history})" if item.history else "")},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": (item.path or "image").lstrip("/")}}}],
                "properties": {
                    "image": report.reference,
                    "imageId": report.image_id,
                    "layer": item.layer,
                    "ids": list(item.ids),
                },
            }
            if item.allowed_by:
                entry["suppressions"] = [{"kind": "external", "justification": item.allowed_by}]
            results.append(entry)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "learnerkit-scan", "version": dist_version("learnerkit"), "rules": rules}},
                "results": results,
            }
        ],
    }


def _security_severity(severity: Severity) -> str:
    return {Severity.CRITICAL: "9.5", Severity.HIGH: "8.0", Severity.MEDIUM: "5.5", Severity.LOW: "2.0"}.get(
        severity, "0.0"
    )
