"""All-or-nothing (gang) placement of a job's learners.

Heuristic: learners are placed one at a time, largest first (GPUs, then memory, then CPUs), each on the
best-fit node of :meth:`Cluster.best_node` with the reservations of the learners placed before it (so
several learners share a node when they fit). If any learner finds no node, every reservation made for
the job is undone: a job holds all of its learners' resources or none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from learnerkit.scheduler.admission.capacity import Cluster, LearnerRequest, PoolKey


@dataclass(frozen=True)
class Placed:
    nodes: tuple[str, ...]
    """The node of each learner, in the job's learner order."""


@dataclass(frozen=True)
class NoRoom:
    learner: int
    """The index of the first learner (in placement order) that found no node."""


def placement_order(learners: Sequence[LearnerRequest]) -> list[int]:
    return sorted(
        range(len(learners)),
        key=lambda i: (-learners[i].gpus, -learners[i].memory_bytes, -learners[i].millicpus, i),
    )


def place_gang(
    cluster: Cluster, learners: Sequence[LearnerRequest], *, open_pools: Iterable[PoolKey] | None = None
) -> Placed | NoRoom:
    """Reserve room for every learner, or for none. ``open_pools`` limits where CPU-only and any-GPU learners go."""
    pools = None if open_pools is None else tuple(open_pools)
    chosen: dict[int, str] = {}
    for index in placement_order(learners):
        request = learners[index]
        name = cluster.best_node(request, open_pools=pools)
        if name is None:
            for done, node in chosen.items():
                cluster.unreserve(node, learners[done])
            return NoRoom(index)
        cluster.reserve(name, request)
        chosen[index] = name
    return Placed(tuple(chosen[i] for i in range(len(learners))))


def release_gang(cluster: Cluster, learners: Sequence[LearnerRequest], nodes: Sequence[str]) -> None:
    for request, node in zip(learners, nodes, strict=True):
        cluster.unreserve(node, request)
