"""The victims chosen are the exact minimum: checked against brute force over every subset of the holders.

The brute force places the preemptor's gang with the admission's placement on a cluster rebuilt here from the
holders that stay, independently of the search's own fit check.
"""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from learnerkit.scheduler.admission.capacity import Cluster, Node
from learnerkit.scheduler.admission.placement import Placed, place_gang
from learnerkit.scheduler.admission.queue import Job
from learnerkit.scheduler.preemption.victims import Holder, choose_victims, eligible, work_lost_s
from tests.unit.scheduler.helpers import gpu_node, job, learner

MIN_RUN_S = 60.0


def fits_without(nodes: list[Node], holders: list[Holder], preemptor: Job, gone: set[str]) -> bool:
    cluster = Cluster(nodes)
    for holder in holders:
        if holder.job.job_id not in gone:
            for request, node in zip(holder.job.learners, holder.nodes, strict=True):
                cluster.reserve(node, request)
    return isinstance(place_gang(cluster, preemptor.learners), Placed)


def brute_force(nodes: list[Node], holders: list[Holder], preemptor: Job) -> tuple[int, float] | None:
    """The fewest victims, then the least work lost, over every subset of the eligible holders."""
    pool = [h for h in holders if eligible(h, preemptor, MIN_RUN_S)]
    costs = [
        (size, sum(work_lost_s(h) for h in subset))
        for size in range(1, len(pool) + 1)
        for subset in combinations(pool, size)
        if fits_without(nodes, holders, preemptor, {h.job.job_id for h in subset})
    ]
    return min(costs, default=None)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Node], list[Holder], Job]:
    """Up to 3 nodes of 8 GPUs filled by up to 7 running jobs (some spanning two nodes), and a preemptor."""
    nodes = [gpu_node(f"n{i}") for i in range(draw(st.integers(1, 3)))]
    free = {node.name: node.gpus for node in nodes}
    holders = []
    for index in range(draw(st.integers(1, 7))):
        width = draw(st.integers(1, min(2, len(nodes))))
        placed = draw(st.permutations([n.name for n in nodes]))[:width]
        gpus = draw(st.integers(1, 4))
        if any(free[name] < gpus for name in placed):
            continue
        for name in placed:
            free[name] -= gpus
        since = draw(st.one_of(st.none(), st.floats(0, 3600, allow_nan=False)))
        holders.append(
            Holder(
                job(f"job-{index}", *(learner(gpus) for _ in placed), priority=draw(st.integers(-3, 2))),
                tuple(placed),
                preemptible=draw(st.booleans()) or draw(st.booleans()),
                running_for_s=draw(st.sampled_from([None, 30.0, 600.0, 7200.0])),
                since_checkpoint_s=since,
                preemptions=draw(st.integers(0, 1)),
            )
        )
    preemptor = job("job-urgent", *(learner(draw(st.integers(1, 8))) for _ in range(draw(st.integers(1, 2)))))
    return nodes, holders, Job(preemptor.job_id, preemptor.tenant, 3, 0.0, preemptor.learners)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_the_victims_are_the_fewest_then_the_least_work_lost(case: tuple[list[Node], list[Holder], Job]) -> None:
    nodes, holders, preemptor = case
    best = brute_force(nodes, holders, preemptor)
    choice = choose_victims(nodes, holders, preemptor, min_run_s=MIN_RUN_S)
    if best is None:
        assert choice is None
        return
    assert choice is not None
    chosen = [h for h in holders if h.job.job_id in choice.victims]
    assert all(eligible(h, preemptor, MIN_RUN_S) for h in chosen)
    assert fits_without(nodes, holders, preemptor, set(choice.victims))
    assert (len(chosen), sum(work_lost_s(h) for h in chosen)) == best
