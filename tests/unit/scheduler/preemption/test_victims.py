"""The preemption decision: the fewest lower-priority preemptible jobs whose release lets the gang place."""

from __future__ import annotations

import pytest

from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.preemption.victims import Choice, Holder, choose_victims, work_lost_s
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


def victims(nodes: list[Node], holders: list[Holder], gpus: int = 8, learners: int = 1) -> tuple[str, ...] | None:
    choice = choose(nodes, holders, gpus, learners)
    return None if choice is None else choice.victims


def test_the_fewest_victims_win_over_lower_priority_ones() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    holders = [running("job-a", "n1", priority=-5), running("job-b", "n1", priority=-5), running("job-c", "n2", gpus=8)]
    assert victims(nodes, holders) == ("job-c",)


def test_among_equals_the_lowest_priority_goes() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2")]
    holders = [running("job-a", "n1", gpus=8, priority=5), running("job-b", "n2", gpus=8, priority=-3)]
    assert victims(nodes, holders) == ("job-b",)


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
    assert victims(nodes, holders, learners=2) == ("job-a",)


def test_victims_the_placement_does_not_need_are_dropped() -> None:
    """job-a loses least (it is tried first) but frees too little; job-b alone is enough."""
    nodes = [gpu_node("n1")]
    holders = [running("job-a", "n1", gpus=2, running_for_s=120.0), running("job-b", "n1", gpus=6)]
    assert victims(nodes, holders, gpus=6) == ("job-b",)


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


def test_among_the_fewest_the_least_work_lost_goes() -> None:
    """Either job alone makes room: the one whose last checkpoint is newer goes, whatever its priority."""
    nodes = [gpu_node("n1")]
    holders = [
        Holder(job("job-stale", learner(4), priority=-5), ("n1",), running_for_s=HOUR, since_checkpoint_s=900.0),
        Holder(job("job-fresh", learner(4), priority=5), ("n1",), running_for_s=HOUR, since_checkpoint_s=20.0),
    ]
    choice = choose(nodes, holders, gpus=4)
    assert choice is not None and (choice.victims, choice.work_lost_s, choice.exact) == (("job-fresh",), 20.0, True)


def test_a_victim_without_a_checkpoint_counts_its_whole_attempt_as_lost() -> None:
    """No usable checkpoint: a halt loses all it ran (an hour), more than the other's 10 minutes since its own."""
    nodes = [gpu_node("n1")]
    without = Holder(job("job-none", learner(4)), ("n1",), running_for_s=HOUR)
    with_one = Holder(job("job-ckpt", learner(4)), ("n1",), running_for_s=2 * HOUR, since_checkpoint_s=600.0)
    assert work_lost_s(without) == HOUR
    assert victims(nodes, [without, with_one], gpus=4) == ("job-ckpt",)


def test_one_victim_when_one_suffices_where_the_greedy_search_took_two() -> None:
    """Releasing the least costly first frees 6 GPUs with job-a and job-b; job-c alone frees them too."""
    nodes = [gpu_node("n1", gpus=12)]
    holders = [
        Holder(job("job-a", learner(3)), ("n1",), running_for_s=HOUR, since_checkpoint_s=1.0),
        Holder(job("job-b", learner(3)), ("n1",), running_for_s=HOUR, since_checkpoint_s=2.0),
        Holder(job("job-c", learner(6)), ("n1",), running_for_s=HOUR, since_checkpoint_s=500.0),
    ]
    assert victims(nodes, holders, gpus=6) == ("job-c",)


@pytest.mark.parametrize(("preemptions", "preempted"), [(0, True), (2, True), (3, False), (7, False)])
def test_a_job_preempted_as_often_as_the_bound_allows_is_preempted_no_more(preemptions: int, preempted: bool) -> None:
    nodes = [gpu_node("n1")]
    holder = Holder(job("job-low", learner(8)), ("n1",), running_for_s=HOUR, preemptions=preemptions)
    preemptor = job("job-urgent", learner(8), priority=10)
    choice = choose_victims(nodes, [holder], preemptor, min_run_s=60.0, max_preemptions=3)
    assert (choice is not None) is preempted
