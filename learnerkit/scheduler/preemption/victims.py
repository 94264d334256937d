"""The preemption decision, pure: the fewest lower-priority preemptible jobs whose release lets a queued job's
whole gang be placed.

The search starts from one node at a time: the eligible jobs with a learner there, lowest priority first (and,
among equals, the one that ran least, so the least progress moves), are released one by one until the gang
places; then the eligible jobs elsewhere, for gangs larger than a node. Victims that the placement turns out
not to need are dropped again. Of all nodes, the choice with the fewest victims wins, then the lowest highest
victim priority, then the node name. Room is what the nodes hold, never aggregate quota: a choice frees room the
queued job can use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from learnerkit.scheduler.admission.capacity import Cluster, Node
from learnerkit.scheduler.admission.placement import Placed, place_gang
from learnerkit.scheduler.admission.queue import Job


@dataclass(frozen=True)
class Holder:
    """A job that holds room on the nodes (admitted or running)."""

    job: Job
    nodes: tuple[str, ...]
    """The node of each learner."""
    preemptible: bool = True
    """False: the manifest opted out, or the job is being preempted already."""
    running_for_s: float | None = None
    """Seconds since this attempt's learners were all running; None while they start."""


@dataclass(frozen=True)
class Choice:
    preemptor: str
    victims: tuple[str, ...]
    """In the order their halts are asked."""
    node: str
    """Where the search that found them started."""


def eligible(holder: Holder, preemptor: Job, min_run_s: float) -> bool:
    """Whether ``preemptor`` may halt ``holder``: lower priority, preemptible, past its minimum run time."""
    return (
        holder.preemptible
        and holder.job.priority < preemptor.priority
        and holder.running_for_s is not None
        and holder.running_for_s >= min_run_s
    )


def choose_victims(
    nodes: Sequence[Node], holders: Sequence[Holder], preemptor: Job, *, min_run_s: float
) -> Choice | None:
    """The jobs to halt so that ``preemptor`` fits; None when no eligible set makes room."""
    candidates = sorted(
        (h for h in holders if eligible(h, preemptor, min_run_s)),
        key=lambda h: (h.job.priority, h.running_for_s or 0.0, h.job.job_id),
    )
    if not candidates:
        return None
    best: tuple[tuple[int, int, str], Choice] | None = None
    for node in sorted({name for h in candidates for name in h.nodes}):
        here = [h for h in candidates if node in h.nodes]
        order = here + [h for h in candidates if node not in h.nodes]
        victims = _enough(nodes, holders, preemptor, order)
        if victims is None:
            continue
        rank = (len(victims), max(v.job.priority for v in victims), node)
        if best is None or rank < best[0]:
            best = (rank, Choice(preemptor.job_id, tuple(v.job.job_id for v in victims), node))
    return None if best is None else best[1]


def _enough(
    nodes: Sequence[Node], holders: Sequence[Holder], preemptor: Job, order: Sequence[Holder]
) -> list[Holder] | None:
    """The first prefix of ``order`` whose release lets the gang place, less the members it does not need."""
    chosen: list[Holder] = []
    for holder in order:
        chosen.append(holder)
        if _fits_without(nodes, holders, preemptor, chosen):
            break
    else:
        return None
    for holder in reversed(chosen[:-1]):  # the last one made it fit: try the others without it
        rest = [h for h in chosen if h is not holder]
        if _fits_without(nodes, holders, preemptor, rest):
            chosen = rest
    return chosen


def _fits_without(nodes: Sequence[Node], holders: Iterable[Holder], preemptor: Job, released: Sequence[Holder]) -> bool:
    gone = {h.job.job_id for h in released}
    cluster = Cluster(nodes)
    for holder in holders:
        if holder.job.job_id in gone:
            continue
        for request, node in zip(holder.job.learners, holder.nodes, strict=True):
            if node in cluster.nodes:
                cluster.reserve(node, request)
    return isinstance(place_gang(cluster, preemptor.learners), Placed)
