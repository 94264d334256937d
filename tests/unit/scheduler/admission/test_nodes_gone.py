"""A job queued again while the only node that holds it is gone (not ready, restarting) waits for it instead of
being rejected: a rejection there was never acted on, so the job stayed QUEUED for good, and a node back a minute
later would have failed every job it held (found on the real-cluster tier's node-loss test)."""

from __future__ import annotations

from learnerkit.scheduler.admission.admit import AdmissionState
from learnerkit.scheduler.admission.stage import Stage
from tests.unit.scheduler.helpers import cpu_node, job, learner


def test_a_job_requeued_with_no_node_waits_and_runs_once_its_node_is_back() -> None:
    node = cpu_node("n1", cpus=2)
    state = AdmissionState([node])
    state.requeue(job("job-1", learner(cpus=1.5)))
    gone = AdmissionState.rebuild(state.records(), [], state.policy)
    result = gone.schedule(0.0)
    assert result.admitted == [] and result.rejected == {}
    assert str(result.waiting["job-1"]).startswith("waiting for ")
    assert gone.record("job-1").stage is Stage.QUEUED
    back = AdmissionState.rebuild(gone.records(), [node], gone.policy)
    assert [a.nodes for a in back.schedule(0.0).admitted] == [("n1",)]


def test_a_job_requeued_while_the_cluster_has_no_node_waits_for_one() -> None:
    state = AdmissionState([])
    state.requeue(job("job-1", learner(cpus=1)))
    result = state.schedule(0.0)
    assert result.rejected == {} and "job-1" in result.waiting


def test_a_new_job_no_node_can_hold_is_still_rejected_at_once() -> None:
    state = AdmissionState([cpu_node("n1", cpus=2)])
    rejected = state.submit(job("job-1", learner(cpus=4)))
    assert rejected is not None and "no node is that large" in rejected.message
    assert state.record("job-1").stage is Stage.REJECTED
