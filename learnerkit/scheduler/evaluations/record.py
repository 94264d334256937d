"""A job's evaluations as recorded in etcd (``<root>/<job_id>/evaluations``): the round, its specs, each outcome.

The record is written before a pair is deployed and after its outcome is known, so a restarted scheduler finds
every evaluation that was in flight and finishes or redoes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from controller_sidecar import keys
from learner.evaluation.spec import EvaluationSpec, spec_from_dict, spec_to_dict
from learnerkit.scheduler.facade import JUDGES_MODEL
from learnerkit.scheduler.manifest.kinds import installed_kinds

Outcome = Literal["running", "passed", "failed", "crashed"]
"""``failed``: a threshold missed (the failures name it); ``crashed``: no verdict (the evaluator or its pair
ended without a report), never taken for a pass."""


def judged_column(spec: EvaluationSpec) -> str | None:
    """The column of the tenant's predictions the evaluation judged instead of the model, if its kind declares one
    and the spec names it."""
    return installed_kinds().judged_column(spec.kind, spec_to_dict(spec))


def evaluations_key(job_id: str, root: str = keys.ROOT) -> str:
    return f"{keys.job_prefix(job_id, root)}evaluations"


@dataclass(frozen=True)
class EvaluationOutcome:
    name: str
    kind: str
    outcome: Outcome = "running"
    message: str = ""
    """``failed``: each threshold missed (metric, value, threshold); ``crashed``: why there is no verdict."""
    failures: tuple[Mapping[str, Any], ...] = ()
    report: str = ""
    """``s3://`` of the JSON report, once there is one."""
    image: str = ""
    """The evaluator image deployed for it (as the image gate resolved it), once it is deployed."""

    def to_raw(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "outcome": self.outcome,
            "message": self.message,
            "failures": [dict(f) for f in self.failures],
            "report": self.report,
            "image": self.image,
        }

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> EvaluationOutcome:
        outcome = raw["outcome"]
        if outcome not in ("running", "passed", "failed", "crashed"):
            raise ValueError(f"evaluation outcome {outcome!r}")
        return cls(
            str(raw["name"]),
            str(raw["kind"]),
            outcome,
            str(raw.get("message", "")),
            tuple(dict(f) for f in raw.get("failures") or ()),
            str(raw.get("report", "")),
            str(raw.get("image", "")),
        )


@dataclass(frozen=True)
class EvaluationRound:
    """One evaluation of a job's model: after training (round 1) or by ``job evaluate`` (the next rounds)."""

    job_id: str
    round: int
    attempt: int
    """The attempt whose saved model is evaluated."""
    specs: tuple[EvaluationSpec, ...]
    outcomes: tuple[EvaluationOutcome, ...]
    signed: bool = False
    """The round's provenance statement is stored (or there is none to write): until then the job keeps its store's
    credentials, and a restarted scheduler writes the statement. A record without it (an older scheduler's) counts
    as signed."""

    @classmethod
    def start(cls, job_id: str, round_: int, attempt: int, specs: tuple[EvaluationSpec, ...]) -> EvaluationRound:
        return cls(job_id, round_, attempt, specs, tuple(EvaluationOutcome(s.name, s.kind) for s in specs))

    def judges(self, name: str) -> str:
        """What the evaluation ``name`` judged: the model, or the tenant's predictions (an evaluation over a
        supplied column of predictions, as its kind declares one, runs no model: fairness's ``prediction``)."""
        spec = next((s for s in self.specs if s.name == name), None)
        prediction = None if spec is None else judged_column(spec)
        return JUDGES_MODEL if prediction is None else f"the tenant's predictions (column {prediction})"

    @property
    def in_flight(self) -> bool:
        return any(o.outcome == "running" for o in self.outcomes)

    @property
    def awaiting_signature(self) -> bool:
        """Every evaluation settled, the round's statement not yet stored."""
        return not self.in_flight and not self.signed

    def settled(self, index: int, outcome: EvaluationOutcome) -> EvaluationRound:
        outcomes = list(self.outcomes)
        outcomes[index] = outcome
        return replace(self, outcomes=tuple(outcomes))

    def to_raw(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "attempt": self.attempt,
            "specs": [spec_to_dict(spec) for spec in self.specs],
            "outcomes": [o.to_raw() for o in self.outcomes],
            "signed": self.signed,
        }

    @classmethod
    def from_raw(cls, job_id: str, raw: Mapping[str, Any]) -> EvaluationRound:
        return cls(
            job_id,
            int(raw["round"]),
            int(raw["attempt"]),
            tuple(spec_from_dict(spec, known=(str(spec.get("kind")),)) for spec in raw["specs"]),
            tuple(EvaluationOutcome.from_raw(o) for o in raw["outcomes"]),
            bool(raw.get("signed", True)),
        )
