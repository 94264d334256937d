"""Fair share between tenants of equal priority: weighted dominant resource fairness over the running jobs.

A tenant's *share* is its dominant share (the largest of its admitted and running GPUs, CPUs and memory, each over
the cluster's) divided by its weight (the tenants file's ``weight``, 1 by default). Within one priority, a pass
offers the room first to the tenant whose share is the lowest with half its next job admitted, one job at a time,
and counts each job it admits at once: under contention, as jobs end and room comes back, each tenant's running
share converges to its weight. (The share before the job favours a tenant of small weight: each of its jobs
overshoots its weight by more than a heavy tenant's do; the share after it disfavours it as much; half way splits
the overshoot evenly.) Within a tenant, jobs keep their queue order (earlier submission first). Fair share never
preempts: it decides who gets room that comes free, between jobs of equal priority.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from typing import NamedTuple

from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.queue import Job, QueueKey


class Usage(NamedTuple):
    """What one tenant holds (admitted and running); a tuple: read for every queued job of every pass."""

    gpus: int = 0
    millicpus: int = 0
    memory_bytes: int = 0


@dataclass(frozen=True)
class Weights:
    weights: Mapping[str, float] = field(default_factory=dict)
    """Per tenant (the tenants file's ``weight``)."""
    default: float = 1.0

    def of(self, tenant: str) -> float:
        return self.weights.get(tenant, self.default)


@dataclass(frozen=True)
class Totals:
    """The cluster's capacity, what a share is a fraction of."""

    gpus: int
    millicpus: int
    memory_bytes: int

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> Totals:
        listed = list(nodes)
        return cls(
            sum(n.gpus for n in listed),
            sum(n.millicpus for n in listed),
            sum(n.memory_bytes for n in listed),
        )


def fair_order(
    queued: Iterable[Job], usage_of: Callable[[str], Usage], totals: Totals, weights: Weights
) -> Iterator[Job]:
    """``queued`` (in queue order) with, within each priority, the tenants interleaved lowest weighted share first.

    ``usage_of`` is read again as the caller admits jobs: a job yielded and admitted raises its tenant's share
    before the next is chosen.
    """

    per_gpu, per_millicpu, per_byte = (
        1 / n if n else 0.0 for n in (totals.gpus, totals.millicpus, totals.memory_bytes)
    )
    weight_of: dict[str, float] = {}

    def share(tenant: str, job: Job) -> float:
        """The tenant's weighted dominant share with half of ``job`` admitted (twice over: the order is the same)."""
        gpus, millicpus, memory_bytes = usage_of(tenant)
        weight = weight_of.get(tenant)
        if weight is None:
            weight = weight_of[tenant] = weights.of(tenant)
        return (
            max(
                (2 * gpus + job.gpus) * per_gpu,
                (2 * millicpus + job.millicpus) * per_millicpu,
                (2 * memory_bytes + job.memory_bytes) * per_byte,
            )
            / weight
        )

    for _, group in groupby(queued, key=lambda job: job.priority):
        jobs = list(group)
        per_tenant: dict[str, list[Job]] = {}
        for job in jobs:
            per_tenant.setdefault(job.tenant, []).append(job)
        if len(per_tenant) == 1:
            yield from jobs
            continue
        heads = {tenant: 0 for tenant in per_tenant}
        heap: list[tuple[float, QueueKey, str]] = [
            (share(tenant, queue[0]), queue[0].queue_key, tenant) for tenant, queue in per_tenant.items()
        ]
        heapq.heapify(heap)
        while heap:
            known, key, tenant = heapq.heappop(heap)
            queue, at = per_tenant[tenant], heads[tenant]
            now = share(tenant, queue[at])
            if now > known:  # it was admitted room since it was pushed: shares only grow within a pass
                heapq.heappush(heap, (now, key, tenant))
                continue
            yield queue[at]
            heads[tenant] = at + 1
            if at + 1 < len(queue):
                heapq.heappush(heap, (share(tenant, queue[at + 1]), queue[at + 1].queue_key, tenant))
