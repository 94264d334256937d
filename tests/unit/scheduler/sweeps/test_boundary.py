"""A learner's request for its next budget, as the sweep driver reads it back from etcd."""

from __future__ import annotations

import json

import pytest

from learnerkit.scheduler.sweeps.boundary import Boundary


def record(**changes: object) -> bytes:
    raw = {"attempt": 2, "step": 30, "budget": 30, "metrics": {"val_loss": [30, 0.25], "loss": [29, 0.5]}}
    return json.dumps({**raw, **changes}).encode()


def test_the_record_reads_back_with_each_metric_s_last_step_and_value() -> None:
    found = Boundary.from_json(record())
    assert found == Boundary(2, 30, 30, {"val_loss": (30, 0.25), "loss": (29, 0.5)})


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[]", record(attempt="2"), record(step=True), json.dumps({"step": 1, "budget": 1}).encode()],
)
def test_a_record_that_does_not_read_is_none(raw: bytes) -> None:
    assert Boundary.from_json(raw) is None


def test_the_rung_s_result_is_the_objective_logged_after_the_last_rung_and_up_to_this_budget() -> None:
    found = Boundary.from_json(record())
    assert found is not None
    assert found.result("val_loss", after=10) == 0.25
    assert found.result("val_loss", after=30) is None  # logged in an earlier rung: not this one's result
    assert found.result("accuracy", after=10) is None  # never logged by the waiting process
    past = Boundary.from_json(record(metrics={"val_loss": [31, 0.2]}))
    assert past is not None and past.result("val_loss", after=10) is None  # past the budget: the history decides
