"""A job's factsheet (`learnerkit.scheduler.provenance.factsheet`) as labelled rows for people: what `job
provenance` prints and the console's trust panel shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNSCANNED = "no scan record"
"""The factsheet's scan verdict of an image no `learnerkit image scan` on the scheduler's host recorded."""


def factsheet_rows(sheet: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) of every fact, in the factsheet's order; every row has its label."""
    image = sheet["image"]
    digest = image.get("digest") or {}
    scan = image["scan"]
    if scan == UNSCANNED:
        scan = f"{UNSCANNED} for this image ID (`learnerkit image scan --image {image['reference']}` records one)"
    purpose = sheet.get("purpose") or {}
    rows = [
        ("status", str(sheet["status"])),
        ("tenant", str(sheet.get("tenant"))),
        ("purpose", f"{purpose.get('name') or '-'}: {purpose.get('description') or '-'}"),
        ("command", str(sheet.get("command"))),
        ("image", str(image["reference"])),
        ("image ID", " ".join(f"{kind}:{value}" for kind, value in sorted(digest.items())) or "not recorded"),
        ("scan", str(scan)),
    ]
    rows += [("result", f"{m['file']} sha256:{m['sha256']}") for m in sheet["model"]]
    rows += [("data", f"{d['object']} sha256:{d['sha256']}") for d in sheet["data"]]
    rows += [("code", f"{c['name']} sha256:{c['sha256'] or 'not reported'}") for c in sheet["code"]]
    for name, metric in sheet["metrics"].items():
        rows.append(("metric", f"{name}: final {metric['final']:g}, best {metric['best']:g}"))
    for attempt in sheet["lineage"]["attempts"]:
        ended = attempt["endedBy"] or "running"
        rows.append(("attempt", f"{attempt['number']}: {ended} {attempt['reason']}".rstrip()))
    for round_ in sheet.get("evaluations", []):
        for evaluation in round_["evaluations"]:
            judged = " (of the tenant's predictions)" if evaluation.get("judges") == "tenant-predictions" else ""
            name = evaluation["name"] + judged
            verdict = f"round {round_['round']}: {name} {evaluation['verdict']} {evaluation['message']}"
            rows.append(("evaluation", verdict.rstrip()))
    return rows
