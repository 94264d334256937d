"""A closed (drained) node keeps its reservations but is never chosen for a new learner, and a job that only it
could hold waits for it rather than being rejected."""

from __future__ import annotations

from learnerkit.scheduler.admission.admit import AdmissionState
from learnerkit.scheduler.admission.capacity import Cluster
from tests.unit.scheduler.helpers import gpu_node, job, learner


def test_a_closed_node_is_never_chosen_nor_counted_as_the_most_free() -> None:
    cluster = Cluster([gpu_node("n1", gpus=8), gpu_node("n2", gpus=4)], closed={"n1"})
    assert cluster.best_node(learner(gpus=2)) == "n2"
    assert cluster.best_node(learner(gpus=8)) is None
    assert cluster.most_free_gpus(learner(gpus=1).pool) == (4, "n2")
    assert cluster.fits_empty(learner(gpus=8))


def test_a_job_only_a_closed_node_could_hold_waits_and_is_placed_once_it_opens() -> None:
    nodes = [gpu_node("n1", gpus=8)]
    state = AdmissionState(nodes, closed={"n1"})
    assert state.submit(job("job-1", learner(gpus=8))) is None
    result = state.schedule(0.0)
    assert result.admitted == [] and result.rejected == {} and "job-1" in result.waiting
    reopened = AdmissionState.rebuild(state.records(), nodes, state.policy)
    assert [a.nodes for a in reopened.schedule(0.0).admitted] == [("n1",)]
