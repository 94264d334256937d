"""A factsheet rendered from a job's provenance statement: the facts a model's consumer asks for, in JSON and in
Markdown. Everything in it comes from the signed statement (and the metric history it names), so it says no more
than the provenance proves."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from learnerkit.scheduler.provenance.statement import ATTEMPTS, LEARNER_IMAGE

FACTSHEET_JSON = "provenance/factsheet.json"
FACTSHEET_MD = "provenance/factsheet.md"
LIMITS = (
    "Facts are what the platform observed; the training script's own claims (metric names, what a file holds) are "
    "the learner's.",
    "Evaluations are listed by round as each round's signed statement records them "
    "(provenance/evaluation-round-<r>.intoto.json).",
)


def factsheet(
    statement: Mapping[str, Any],
    metrics: Sequence[Mapping[str, Any]] = (),
    rounds: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The factsheet of ``statement``; ``metrics``: the job's metric history records (``{step, values}``);
    ``rounds``: each evaluation round's summary (`learnerkit.scheduler.provenance.evaluation.round_summary`)."""
    predicate = statement["predicate"]
    definition, run = predicate["buildDefinition"], predicate["runDetails"]
    external = definition["externalParameters"]
    manifest = external.get("manifest", {})
    dependencies = definition["resolvedDependencies"]
    image: Mapping[str, Any] = next((d for d in dependencies if d.get("name") == LEARNER_IMAGE), {})
    attempts: Mapping[str, Any] = next((b for b in run.get("byproducts", []) if b.get("name") == ATTEMPTS), {})
    lineage = attempts.get("annotations", {}).get("attempts", [])
    return {
        "job": definition["internalParameters"].get("jobId"),
        "status": definition["internalParameters"].get("status"),
        "purpose": {"name": manifest.get("name"), "description": manifest.get("description")},
        "tenant": external.get("tenant"),
        "command": external.get("command"),
        "model": [{"file": s["name"], "sha256": s["digest"]["sha256"]} for s in statement["subject"]],
        "data": [
            {"object": d["uri"], "sha256": d["digest"]["sha256"]} for d in dependencies if d["name"].startswith("data:")
        ],
        "code": [
            {"name": d["name"], "sha256": d.get("digest", {}).get("sha256")}
            for d in dependencies
            if d["name"].startswith("model") or d["name"].startswith("pypi:")
        ],
        "image": {
            "reference": image.get("uri", "").removeprefix("docker-image://"),
            "digest": image.get("digest"),
            "scan": image.get("annotations", {}).get("scanVerdict", "no scan record"),
        },
        "metrics": _metrics(metrics),
        "evaluations": [dict(r) for r in rounds],
        "lineage": {
            "attempts": lineage,
            "resumes": sum(1 for a in lineage if a.get("resumedFrom") is not None),
            "preemptions": sum(1 for a in lineage if a.get("endedBy") == "PREEMPTED"),
            "restarts": sum(1 for a in lineage if a.get("endedBy") == "RESTARTED"),
        },
        "limits": list(LIMITS),
    }


def _metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per metric: the final value, the best (lowest for names with loss or error, else highest), and its shape."""
    series: dict[str, list[tuple[Any, float]]] = {}
    for record in records:
        for name, value in (record.get("values") or {}).items():
            if isinstance(value, int | float):
                series.setdefault(name, []).append((record.get("step"), float(value)))
    found = {}
    for name, points in sorted(series.items()):
        values = [v for _, v in points]
        lower = any(word in name.lower() for word in ("loss", "error"))
        best = min(values) if lower else max(values)
        found[name] = {"final": values[-1], "best": best, "points": len(values), "first": values[0]}
    return found


def _judged(evaluation: Mapping[str, Any]) -> str:
    return ", of the tenant's predictions" if evaluation.get("judges") == "tenant-predictions" else ""


def factsheet_markdown(sheet: Mapping[str, Any]) -> str:
    purpose = sheet["purpose"]
    lines = [
        f"# Factsheet: job {sheet['job']}",
        "",
        f"- **Purpose**: {purpose.get('name') or '-'}: {purpose.get('description') or '-'}",
        f"- **Status**: {sheet['status']}; tenant {sheet['tenant']}",
        f"- **Command**: `{sheet['command']}`",
        f"- **Image**: `{sheet['image']['reference']}` ({json.dumps(sheet['image']['digest'])}); "
        f"scan: {sheet['image']['scan']}",
        "",
        "## Model files",
        "",
        *(f"- `{m['file']}` sha256 `{m['sha256']}`" for m in sheet["model"]),
        "",
        "## Data",
        "",
        *(f"- `{d['object']}` sha256 `{d['sha256']}`" for d in sheet["data"]),
        "",
        "## Code",
        "",
        *(f"- `{c['name']}` sha256 `{c['sha256'] or 'not reported'}`" for c in sheet["code"]),
        "",
        "## Metrics",
        "",
        "| metric | final | best | first | points |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {m['final']:g} | {m['best']:g} | {m['first']:g} | {m['points']} |"
            for name, m in sheet["metrics"].items()
        ),
        "",
        "## Evaluations",
        "",
        *(
            f"- round {r['round']} (the model of attempt {r['attempt']}): {r['verdict']}"
            + "".join(
                f"\n  - {e['name']} ({e['kind']}{_judged(e)}): {e['verdict']}"
                + (f": {e['message']}" if e["message"] else "")
                for e in r["evaluations"]
            )
            for r in sheet["evaluations"]
        ),
        *([] if sheet["evaluations"] else ["none"]),
        "",
        "## Lineage",
        "",
        *(
            f"- attempt {a['number']}: {a['startedAt']} to {a['endedAt'] or '-'}, {a['endedBy'] or 'running'}"
            + (f" on {', '.join(a['nodes'])}" if a.get("nodes") else "")
            + (f", resumed from attempt {a['resumedFrom']}" if a.get("resumedFrom") else "")
            + (f" (checkpoint of step {a['restoredStep']}" if a.get("restoredStep") is not None else "")
            + (f", marker sha256 `{a['checkpointSha256']}`" if a.get("checkpointSha256") else "")
            + (")" if a.get("restoredStep") is not None else "")
            + (f": {a['reason']}" if a.get("reason") else "")
            for a in sheet["lineage"]["attempts"]
        ),
        "",
        "## Limits",
        "",
        *(f"- {limit}" for limit in sheet["limits"]),
        "",
    ]
    return "\n".join(lines)
