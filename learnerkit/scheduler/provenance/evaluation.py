"""One evaluation round of a job's model as a signed in-toto Statement v1 (docs/provenance.md, "Evaluation rounds").

The subject is the model: the job's result files with the SHA-256 the model signature lists. The predicate,
``https://learnerkit.dev/evaluation/v1``, records per evaluation the evaluator image by digest, the evaluation
spec, the evaluation data objects and each report file by the digests its sidecar took as they streamed, and the
verdict with the thresholds missed. in-toto's ``test-result`` v0.1 predicate was read and does not fit: its
``configuration`` holds inputs only, so it has no place for the reports' digests nor for a verdict per
evaluation with the metric, value and threshold behind it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller_sidecar.provenancerecord import Digested
from learnerkit import __version__
from learnerkit.common.signing import STATEMENT_TYPE
from learnerkit.scheduler.manifest.kinds import installed_kinds
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.statement import BUILDER_ID

PREDICATE_TYPE = "https://learnerkit.dev/evaluation/v1"
ROUND_PREFIX = "provenance/evaluation-round-"
ROUND_SUFFIX = ".intoto.json"


def round_file(round_: int) -> str:
    """Below the job's prefix: one per round, so a round never replaces another's."""
    return f"{ROUND_PREFIX}{round_}{ROUND_SUFFIX}"


def round_of(name: str) -> int | None:
    """The round a file below the job's prefix is the statement of, or None."""
    if not (name.startswith(ROUND_PREFIX) and name.endswith(ROUND_SUFFIX)):
        return None
    number = name[len(ROUND_PREFIX) : -len(ROUND_SUFFIX)]
    return int(number) if number.isdigit() else None


@dataclass(frozen=True)
class EvaluationFact:
    name: str
    kind: str
    verdict: str
    """``passed``, ``failed`` (a threshold missed) or ``crashed`` (no verdict)."""
    message: str
    failures: tuple[Mapping[str, Any], ...]
    spec: Mapping[str, Any]
    """The evaluation's spec as the evaluator got it (``EVALUATION_SPEC``)."""
    image: ImageFact | None
    """The evaluator image as deployed; None where the scheduler that settled it did not deploy it."""
    data: tuple[Digested, ...] = ()
    """Each evaluation data object, ``s3://bucket/key``."""
    reports: tuple[Digested, ...] = ()
    """Each report file, named by its path below the job's prefix."""


@dataclass(frozen=True)
class RoundFacts:
    job_id: str
    round: int
    attempt: int
    """The attempt whose saved model was evaluated."""
    model: tuple[Digested, ...]
    """The job's result files, as the model signature lists them."""
    evaluations: tuple[EvaluationFact, ...]
    instance: str


def round_verdict(verdicts: list[str]) -> str:
    """``crashed`` when any has no verdict, else ``failed`` when any missed a threshold, else ``passed``."""
    for worst in ("crashed", "failed"):
        if worst in verdicts:
            return worst
    return "passed"


def evaluation_statement(facts: RoundFacts) -> dict[str, Any]:
    evaluations = [_evaluation(e) for e in facts.evaluations]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": r.name, "digest": {"sha256": r.sha256}} for r in facts.model],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "jobId": facts.job_id,
            "round": facts.round,
            "attempt": facts.attempt,
            "evaluator": {"id": BUILDER_ID, "version": {"learnerkit": __version__, "instance": facts.instance}},
            "verdict": round_verdict([e.verdict for e in facts.evaluations]),
            "evaluations": evaluations,
        },
    }


def _evaluation(fact: EvaluationFact) -> dict[str, Any]:
    found: dict[str, Any] = {
        "name": fact.name,
        "kind": fact.kind,
        "verdict": fact.verdict,
        "message": fact.message,
        "failures": [dict(f) for f in fact.failures],
        "judges": "model" if installed_kinds().judged_column(fact.kind, fact.spec) is None else "tenant-predictions",
        "spec": dict(fact.spec),
        "data": [{"uri": d.name, "digest": {"sha256": d.sha256}, "annotations": {"size": d.size}} for d in fact.data],
        "reports": [
            {"name": r.name, "digest": {"sha256": r.sha256}, "annotations": {"size": r.size}} for r in fact.reports
        ],
    }
    if fact.image is not None:
        image: dict[str, Any] = {"uri": f"docker-image://{fact.image.reference}"}
        if fact.image.digest:
            algorithm, _, hexdigest = fact.image.digest.partition(":")
            image["digest"] = {algorithm: hexdigest}
        found["evaluatorImage"] = image
    return found


def round_summary(statement: Mapping[str, Any]) -> dict[str, Any]:
    """What the factsheet lists of a round: its number, the attempt evaluated and each verdict (with what it
    judged, where the statement says: statements from before ``judges`` render as they did)."""
    predicate = statement["predicate"]
    return {
        "round": predicate["round"],
        "attempt": predicate["attempt"],
        "verdict": predicate["verdict"],
        "evaluations": [
            {"name": e["name"], "kind": e["kind"], "verdict": e["verdict"], "message": e["message"]}
            | ({"judges": e["judges"]} if "judges" in e else {})
            for e in predicate["evaluations"]
        ],
    }


def listed_data(statement: Mapping[str, Any]) -> frozenset[str]:
    """The evaluation data objects (``s3://bucket/key``) a round's statement lists."""
    return frozenset(str(d["uri"]) for e in statement["predicate"]["evaluations"] for d in e.get("data", []))
