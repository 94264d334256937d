"""A version's lineage, read from its signed statements alone: job, attempts, sweep, data, images, parent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from learnerkit.scheduler.provenance.statement import ATTEMPTS, LEARNER_IMAGE


def lineage(
    statement: Mapping[str, Any],
    rounds: Sequence[Mapping[str, Any]],
    parent: str | None = None,
    trial: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``statement``: the job's provenance; ``rounds``: each evaluation round's statement; ``parent``: the version
    it was fine-tuned from (``NAME@sha256:...``), as the registrant named it; ``trial``: the sweep trial the job
    ran (``sweep``, ``trial``, ``job``, ``rung``), as the scheduler's sweep record states it (the provenance
    signs only the trial's parameters)."""
    predicate = statement["predicate"]
    definition, run = predicate["buildDefinition"], predicate["runDetails"]
    external, internal = definition["externalParameters"], definition["internalParameters"]
    dependencies = definition["resolvedDependencies"]
    image: Mapping[str, Any] = next((d for d in dependencies if d.get("name") == LEARNER_IMAGE), {})
    attempts: Mapping[str, Any] = next((b for b in run.get("byproducts", []) if b.get("name") == ATTEMPTS), {})
    history = attempts.get("annotations", {}).get("attempts", [])
    evaluators = {
        (e["evaluatorImage"]["uri"].removeprefix("docker-image://"), e["evaluatorImage"]["digest"]["sha256"])
        for r in rounds
        for e in r["predicate"]["evaluations"]
        if "evaluatorImage" in e and "sha256" in e["evaluatorImage"].get("digest", {})
    }
    return {
        "job": internal.get("jobId"),
        "tenant": external.get("tenant"),
        "attempt": history[-1]["number"] if history else None,
        "sweep": _sweep(external.get("sweepParameters"), trial),
        "data": [
            {"uri": d["uri"], "sha256": d["digest"]["sha256"]} for d in dependencies if d["name"].startswith("data:")
        ],
        "evaluationData": [
            {"uri": uri, "sha256": sha}
            for uri, sha in sorted(
                {
                    (d["uri"], d["digest"]["sha256"])
                    for r in rounds
                    for e in r["predicate"]["evaluations"]
                    for d in e.get("data", [])
                }
            )
        ],
        "learnerImage": {
            "reference": str(image.get("uri", "")).removeprefix("docker-image://"),
            "sha256": image.get("digest", {}).get("sha256"),
        },
        "evaluatorImages": [{"reference": ref, "sha256": sha} for ref, sha in sorted(evaluators)],
        "parent": parent,
    }


def _sweep(parameters: Mapping[str, Any] | None, trial: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not parameters and trial is None:
        return None
    return {**(trial or {}), "parameters": dict(parameters or {})}


def uses(record: Mapping[str, Any], digest: str) -> list[str]:
    """What of ``record`` (a version's lineage) has ``digest`` (hex or ``sha256:hex``) or is named ``digest``:
    ``data s3://...``, ``learner image ...``, ``evaluator image ...``; [] when nothing does."""
    wanted = digest.removeprefix("sha256:")
    found = []
    for item in record.get("data", []):
        if wanted in (item["sha256"], item["uri"]):
            found.append(f"data {item['uri']}")
    for item in record.get("evaluationData", []):
        if wanted in (item["sha256"], item["uri"]):
            found.append(f"evaluation data {item['uri']}")
    learner = record.get("learnerImage") or {}
    if wanted in (learner.get("sha256"), learner.get("reference")):
        found.append(f"learner image {learner.get('reference')}")
    for image in record.get("evaluatorImages", []):
        if wanted in (image["sha256"], image["reference"]):
            found.append(f"evaluator image {image['reference']}")
    return found
