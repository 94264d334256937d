"""The preemption decision, pure: the fewest lower-priority preemptible jobs whose release lets a queued job's
whole gang be placed, and among those the ones whose halt loses the least work.

Exact where it is cheap: every set of eligible jobs is tried, smallest first, and of the sets of the smallest size
that make room, the one that loses the least work (each victim's seconds since its last usable checkpoint; all its
attempt's seconds where it has none) wins, then the lowest highest victim priority, then the job ids. The number of
sets tried is bounded (:data:`EXACT_FITS`); past it, the answer is a greedy one: from one node at a time, release the
eligible jobs there (least work lost first, then lowest priority), then those elsewhere, until the gang places, and
drop the victims the placement turns out not to need; the fewest victims over all start nodes win, then the least
work lost. Room is what the nodes hold, never aggregate quota: a choice frees room the queued job can use.

Over time (aging): a job preempted ``max_preemptions`` times is never preempted again until it ends, so a job of low
priority always finishes ([scheduling.md](docs/scheduling.md#preemption-over-time)).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb

from learnerkit.scheduler.admission.capacity import Cluster, Node
from learnerkit.scheduler.admission.placement import Placed, place_gang
from learnerkit.scheduler.admission.queue import Job

EXACT_FITS = 5000
"""The most victim sets the exact search tries (each a placement); past it, the greedy choice stands."""


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
    since_checkpoint_s: float | None = None
    """Seconds of training since its last usable checkpoint; None: it has none."""
    preemptions: int = 0
    """Times it was preempted before (its attempts that ended so)."""


@dataclass(frozen=True)
class Choice:
    preemptor: str
    victims: tuple[str, ...]
    """In the order their halts are asked (by job id)."""
    work_lost_s: float
    """What halting them loses, in all (:func:`work_lost_s`)."""
    exact: bool
    """False: the search stopped at :data:`EXACT_FITS` and this is the greedy choice."""


def work_lost_s(holder: Holder) -> float:
    """The training a halt of ``holder`` loses: since its last usable checkpoint, or without one its whole
    attempt."""
    if holder.since_checkpoint_s is not None:
        return holder.since_checkpoint_s
    return holder.running_for_s or 0.0


def eligible(holder: Holder, preemptor: Job, min_run_s: float, max_preemptions: int | None = None) -> bool:
    """Whether ``preemptor`` may halt ``holder``: lower priority, preemptible, past its minimum run time, and
    preempted fewer than ``max_preemptions`` times (None: no bound)."""
    return (
        holder.preemptible
        and holder.job.priority < preemptor.priority
        and holder.running_for_s is not None
        and holder.running_for_s >= min_run_s
        and (max_preemptions is None or holder.preemptions < max_preemptions)
    )


def choose_victims(
    nodes: Sequence[Node],
    holders: Sequence[Holder],
    preemptor: Job,
    *,
    min_run_s: float,
    max_preemptions: int | None = None,
) -> Choice | None:
    """The jobs to halt so that ``preemptor`` fits; None when no eligible set makes room."""
    candidates = sorted(
        (h for h in holders if eligible(h, preemptor, min_run_s, max_preemptions)),
        key=lambda h: (work_lost_s(h), h.job.priority, h.job.job_id),
    )
    greedy = _greedy(nodes, holders, preemptor, candidates)
    if greedy is None:
        return None
    tried = 0
    for size in range(1, len(greedy)):
        tried += comb(len(candidates), size)
        if tried > EXACT_FITS:
            return _choice(preemptor, greedy, exact=False)
        fitting = [
            subset for subset in combinations(candidates, size) if _fits_without(nodes, holders, preemptor, subset)
        ]
        if fitting:
            return _choice(preemptor, min(fitting, key=_cost), exact=True)
    # No smaller set makes room: the greedy size is the least; the best set of that size, where affordable.
    if tried + comb(len(candidates), len(greedy)) > EXACT_FITS:
        return _choice(preemptor, greedy, exact=False)
    same_size = [
        subset for subset in combinations(candidates, len(greedy)) if _fits_without(nodes, holders, preemptor, subset)
    ]
    return _choice(preemptor, min(same_size, key=_cost), exact=True)


def _cost(victims: Sequence[Holder]) -> tuple[int, float, int, tuple[str, ...]]:
    return (
        len(victims),
        sum(work_lost_s(v) for v in victims),
        max(v.job.priority for v in victims),
        tuple(sorted(v.job.job_id for v in victims)),
    )


def _choice(preemptor: Job, victims: Sequence[Holder], *, exact: bool) -> Choice:
    return Choice(
        preemptor.job_id,
        tuple(sorted(v.job.job_id for v in victims)),
        sum(work_lost_s(v) for v in victims),
        exact,
    )


def _greedy(
    nodes: Sequence[Node], holders: Sequence[Holder], preemptor: Job, candidates: Sequence[Holder]
) -> list[Holder] | None:
    """From each node in turn, the first victims that make room, less those not needed; the cheapest of them."""
    best: list[Holder] | None = None
    for node in sorted({name for h in candidates for name in h.nodes}):
        order = [h for h in candidates if node in h.nodes] + [h for h in candidates if node not in h.nodes]
        victims = _enough(nodes, holders, preemptor, order)
        if victims is not None and (best is None or _cost(victims) < _cost(best)):
            best = victims
    return best


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
