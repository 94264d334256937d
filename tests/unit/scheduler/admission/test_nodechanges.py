"""The nodes admission works with as the cluster changes: listed ones as listed, unlisted ones that still hold
learners shrunk to them."""

from __future__ import annotations

from learnerkit.scheduler.admission.admit import JobRecord
from learnerkit.scheduler.admission.capacity import GIB, Node
from learnerkit.scheduler.admission.nodechanges import changed, working_nodes
from learnerkit.scheduler.admission.stage import Stage
from tests.unit.scheduler.helpers import A100, cpu_node, gpu_node, job, learner


def test_listed_nodes_are_used_as_listed_and_a_node_gone_empty_is_dropped() -> None:
    known = {"n1": gpu_node("n1"), "n2": gpu_node("n2")}
    listed = [gpu_node("n1"), gpu_node("n3")]
    assert working_nodes(listed, known, []) == listed


def test_an_unlisted_node_keeps_exactly_what_its_learners_hold() -> None:
    known = {"n1": gpu_node("n1"), "n2": cpu_node("n2")}
    running = JobRecord(
        job("job-a", learner(2, cpus=3, memory_gib=10), learner(0, cpus=1.5)), Stage.RUNNING, ("n1", "n2")
    )
    queued = JobRecord(job("job-q"), Stage.QUEUED)
    nodes = working_nodes([], known, [running, queued])
    assert nodes == [Node("n1", 3.0, 10 * GIB, 2, A100), Node("n2", 1.5, 4 * GIB)]


def test_a_change_is_a_different_set_of_nodes_in_any_order() -> None:
    assert not changed([cpu_node("b"), cpu_node("a")], [cpu_node("a"), cpu_node("b")])
    assert changed([cpu_node("a")], [cpu_node("a"), cpu_node("b")])
    assert changed([cpu_node("a", cpus=8)], [cpu_node("a", cpus=16)])
