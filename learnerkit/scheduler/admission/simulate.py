"""The admission run on simulated time, pure: tenants that keep the cluster saturated with jobs of known lengths.

What the fair share test and ``bench/fair_share.py`` measure: each tenant keeps ``backlog`` jobs queued at all
times; each step ends the jobs whose time is up, runs one admission pass, and charges every running job's CPUs
for the step. Time is simulated (``step_s`` at a time), never read.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from learnerkit.scheduler.admission.admit import AdmissionPolicy, AdmissionState
from learnerkit.scheduler.admission.capacity import GIB, LearnerRequest, Node
from learnerkit.scheduler.admission.queue import Job


@dataclass(frozen=True)
class Workload:
    """One tenant's stream of jobs: CPUs and length drawn uniformly from the ranges."""

    tenant: str
    cpus: tuple[int, int] = (1, 4)
    seconds: tuple[float, float] = (10.0, 90.0)
    backlog: int = 20
    priority: int = 0


def cpu_seconds(
    nodes: Sequence[Node],
    policy: AdmissionPolicy,
    workloads: Sequence[Workload],
    *,
    duration_s: float,
    step_s: float = 1.0,
    seed: int = 0,
) -> dict[str, float]:
    """Each tenant's CPU-seconds of running jobs over ``duration_s`` of simulated time."""
    rng = random.Random(seed)  # noqa: S311 -- a seeded workload, not a secret
    state = AdmissionState(nodes, policy)
    lengths: dict[str, float] = {}
    ends: dict[str, float] = {}
    cpus: dict[str, float] = {}
    tenant_of: dict[str, str] = {}
    queued = {w.tenant: 0 for w in workloads}
    used = {w.tenant: 0.0 for w in workloads}
    serial = 0
    now = 0.0
    while now < duration_s:
        for job_id in [j for j, end in ends.items() if end <= now]:
            state.release(job_id)
            del ends[job_id]
        for workload in workloads:
            while queued[workload.tenant] < workload.backlog:
                serial += 1
                job_id = f"{workload.tenant}-{serial:06d}"
                request = LearnerRequest(rng.randint(*workload.cpus), GIB, 0, None)
                state.submit(Job(job_id, workload.tenant, workload.priority, now, (request,)))
                lengths[job_id] = rng.uniform(*workload.seconds)
                cpus[job_id] = float(request.cpus)
                tenant_of[job_id] = workload.tenant
                queued[workload.tenant] += 1
        for admitted in state.schedule(now).admitted:
            state.mark_running(admitted.job_id)
            ends[admitted.job_id] = now + lengths[admitted.job_id]
            queued[tenant_of[admitted.job_id]] -= 1
        step = min(step_s, duration_s - now)
        for job_id in ends:
            used[tenant_of[job_id]] += cpus[job_id] * step
        now += step
    return used
