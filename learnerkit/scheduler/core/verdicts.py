"""A job's model verdict, beside its training status: what the latest evaluation round decided of the model.

``accepted`` (every evaluation of the latest round passed), ``rejected (<name>: <metric> <value>, wants
<threshold>; ...)`` (a threshold missed), ``pending`` (evaluations are planned or running: the manifest has an
``evaluations:`` section and the job can still complete, or a round is in flight), ``not evaluated`` (no
evaluation planned, or the job ended without a model to evaluate). A round whose evaluator ended without a report
reads ``not evaluated (<name>: no verdict: <why>)``: never taken for a pass, nor for a rejection. A fairness
evaluation over the tenant's ``prediction`` column judged the tenant's predictions, not the model; its part of the
verdict says so (docs/evaluations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from learnerkit.scheduler.evaluations.record import EvaluationOutcome, EvaluationRound, judged_column
from learnerkit.scheduler.facade import MODEL_ACCEPTED, MODEL_NOT_EVALUATED, MODEL_PENDING, MODEL_REJECTED
from learnerkit.scheduler.jobs.state import JobStatus

ENDED_WITHOUT_MODEL = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})


def model_verdict(status: JobStatus, planned: bool, evaluated: EvaluationRound | None) -> str:
    """``planned``: the manifest asks for evaluations after training; ``evaluated``: the job's latest round."""
    if evaluated is None:
        return MODEL_PENDING if planned and status not in ENDED_WITHOUT_MODEL else MODEL_NOT_EVALUATED
    if evaluated.in_flight:
        return MODEL_PENDING
    judged = {spec.name: judged_column(spec) for spec in evaluated.specs}
    failed = [_missed(o, judged.get(o.name)) for o in evaluated.outcomes if o.outcome == "failed"]
    if failed:
        return f"{MODEL_REJECTED} ({'; '.join(failed)})"
    crashed = [f"{o.name}: no verdict: {o.message}" for o in evaluated.outcomes if o.outcome == "crashed"]
    if crashed:
        return f"{MODEL_NOT_EVALUATED} ({'; '.join(crashed)})"
    return MODEL_ACCEPTED


def _missed(outcome: EvaluationOutcome, prediction: str | None) -> str:
    name = outcome.name if prediction is None else f"{outcome.name} on the tenant's predictions ({prediction})"
    missed = ", ".join(_failure(f) for f in outcome.failures) or outcome.message or "a threshold missed"
    return f"{name}: {missed}"


def _failure(failure: Mapping[str, Any]) -> str:
    value = failure.get("value")
    shown = f"{value:.3g}" if isinstance(value, int | float) else str(value)
    at = failure.get("at") or {}
    where = f" ({', '.join(f'{k} {v}' for k, v in at.items())})" if at else ""
    return f"{failure.get('metric')} {shown}{where}, wants {failure.get('threshold')}"
