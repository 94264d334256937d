"""The preemption decision: the fewest lower-priority preemptible jobs whose release lets the gang place."""

from __future__ import annotations

from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.preemption.victims import Choice, Holder, choose_victims
from tests.unit.scheduler.helpers import gpu_node, job, learner

HOUR = 3600.0


def running(
    job_id: str,
    *nodes: str,
    gpus: int = 4,
    priority: int = 0,
    preemptible: bool = True,
    running_for_s: float | None = HOUR,
) -> Holder:
    learners = tuple(learner(gpus) for _ in nodes)
    return Holder(job(job_id, *learners, priority=priority), nodes, preemptible, running_for_s)


def choose(
    nodes: list[Node], holders: list[Holder], gpus: int = 8, learners: int = 1, min_run_s: float = 60.0
) -> Choice | None:
    preemptor = job("job-urgent", *(learner(gpus) for _ in range(learners)), priority=10)
    return choose_victims(nodes, holders, preemptor, min_run_s=min_run_s)


def test_the_fewest_victims_win_over_lower_priority_ones() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    holders = [running("job-a", "n1", priority=-5), running("job-b", "n1", priority=-5), running("job-c", "n2", gpus=8)]
    assert choose(nodes, holders) == Choice("job-urgent", ("job-c",), "n2")


def test_among_equals_the_lowest_priority_goes() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    holders = [running("job-a", "n1", gpus=8, priority=5), running("job-b", "n2", gpus=8, priority=-3)]
    assert choose(nodes, holders) == Choice("job-urgent", ("job-b",), "n2")


def test_room_on_one_node_counts_not_free_room_in_aggregate() -> None:
    """Eight GPUs are free over the cluster, four per node: one 8-GPU learner still needs a victim."""
    nodes = [gpu_node("n1"), gpu_node("n2")]
    holders = [running("job-a", "n1"), running("job-b", "n2")]
    choice = choose(nodes, holders)
    assert choice is not None and len(choice.victims) == 1


def test_a_gang_larger_than_a_node_takes_victims_on_every_node_it_needs() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2"), gpu_node("n3")]
    holders = [
        running("job-a", "n1", gpus=8),
        running("job-b", "n2", gpus=8),
        running("job-c", "n3", gpus=8, priority=20),
    ]
    choice = choose(nodes, holders, learners=2)
    assert choice is not None and sorted(choice.victims) == ["job-a", "job-b"]


def test_a_multi_node_victim_is_released_gang_wide() -> None:
    """One victim with a learner on each node frees both: one victim is enough for two learners."""
    nodes = [gpu_node("n1"), gpu_node("n2")]
    holders = [running("job-a", "n1", "n2", gpus=8)]
    assert choose(nodes, holders, learners=2) == Choice("job-urgent", ("job-a",), "n1")


def test_victims_the_placement_does_not_need_are_dropped() -> None:
    """job-a runs least (it is tried first) but frees too little; job-b alone is enough."""
    nodes = [gpu_node("n1")]
    holders = [running("job-a", "n1", gpus=2, running_for_s=120.0), running("job-b", "n1", gpus=6)]
    assert choose(nodes, holders, gpus=6) == Choice("job-urgent", ("job-b",), "n1")


def test_no_victim_among_jobs_that_may_not_be_preempted() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2"), gpu_node("n3"), gpu_node("n4")]
    holders = [
        running("job-equal", "n1", gpus=8, priority=10),
        running("job-opted-out", "n2", gpus=8, preemptible=False),
        running("job-young", "n3", gpus=8, running_for_s=59.0),
        running("job-starting", "n4", gpus=8, running_for_s=None),
    ]
    assert choose(nodes, holders) is None


def test_no_victims_when_even_all_of_them_make_no_room() -> None:
    nodes = [gpu_node("n1", gpus=4)]
    assert choose(nodes, [running("job-a", "n1")]) is None
