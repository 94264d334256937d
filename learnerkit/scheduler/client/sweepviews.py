"""A `SweepView` from its JSON form, as the API sends it; fields this client does not know are ignored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from learnerkit.scheduler.errors import SchedulerError
from learnerkit.scheduler.facade import ParameterView, SweepView, TrialView


def trial_view(data: Mapping[str, Any]) -> TrialView:
    return TrialView(
        index=int(data["index"]),
        job_id=str(data["job_id"]),
        state=str(data["state"]),
        rung=int(data["rung"]),
        budget=int(data["budget"]),
        results=tuple(float(v) for v in data.get("results", ())),
        reason=str(data.get("reason", "")),
        parameters=dict(data.get("parameters") or {}),
        job_status=str(data.get("job_status", "")),
        freed_bytes=int(data.get("freed_bytes", 0)),
        results_location=str(data.get("results_location", "")),
        first_rung=int(data.get("first_rung", 1)),
        lineage=tuple(int(i) for i in data.get("lineage", ())),
    )


def parameter_view(data: Mapping[str, Any]) -> ParameterView:
    return ParameterView(
        name=str(data["name"]),
        type=str(data["type"]),
        low=float(data.get("low", 0.0)),
        high=float(data.get("high", 0.0)),
        values=tuple(data.get("values", ())),
    )


def sweep_view(data: Mapping[str, Any]) -> SweepView:
    try:
        return SweepView(
            sweep_id=str(data["sweep_id"]),
            tenant=str(data["tenant"]),
            status=str(data["status"]),
            reason=str(data.get("reason", "")),
            algorithm=str(data["algorithm"]),
            metric=str(data["metric"]),
            goal=str(data["goal"]),
            unit=str(data["unit"]),
            rungs=tuple(int(r) for r in data["rungs"]),
            trials_total=int(data["trials_total"]),
            concurrency=int(data["concurrency"]),
            submitted_at=str(data.get("submitted_at", "")),
            trials=tuple(trial_view(item) for item in data.get("trials", ())),
            freed_bytes=int(data.get("freed_bytes", 0)),
            space=tuple(parameter_view(item) for item in data.get("space", ())),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SchedulerError(f"the scheduler sent a sweep this client cannot read ({type(e).__name__}: {e})") from e
