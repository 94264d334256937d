"""What the facade shows of the queue and the cluster as a whole: a tenant's queued jobs with why each waits and
its place, the preemptions that touched the tenant, and (for an operator) the nodes, the tenants' quotas and use,
and the usage analytics `/metrics` exports from the same figures. Plain data: the console renders it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class QueuedJobView:
    job_id: str
    name: str
    priority: int
    status: str
    """QUEUED, or PREEMPTED while a preempted job waits to resume."""
    kind: str
    """quota, gang, node fit, priority, backoff, drain or waiting (`admission.freeing`)."""
    reason: str
    """The sentence `job status` shows."""
    frees: str
    """What would let it go: "2 CPUs more free on a node", "quota: 1 running job of yours must end"."""
    place_in_tenant: int
    """1-based, among the tenant's queued jobs, in the order the next pass takes them."""
    place_in_queue: int
    """1-based, in the whole queue."""
    others_ahead: int
    """Other tenants' jobs ahead of it: counted, never named."""
    submitted_at: str


@dataclass(frozen=True)
class PreemptionView:
    at: str
    """ISO-8601 UTC: when the victim's attempt ended."""
    victim: str
    """The tenant's own job by id; another tenant's as "a job of priority N of another tenant"."""
    victim_own: bool
    preemptor: str
    preemptor_own: bool
    attempt: int
    """The victim's attempt that was halted."""
    steps_lost: int | None
    """0 where the halt checkpointed; None while not measured yet."""
    work_lost_s: float | None


@dataclass(frozen=True)
class QueueView:
    tenant: str
    jobs: tuple[QueuedJobView, ...]
    """The tenant's queued jobs, in the order the next pass takes them."""
    queued_in_all: int
    """Every tenant's queued jobs together."""
    preemptions: tuple[PreemptionView, ...]
    """Newest first: the preemptions whose victim or preemptor is the tenant's, at most `PREEMPTIONS_SHOWN`."""


PREEMPTIONS_SHOWN = 100


@dataclass(frozen=True)
class NodeView:
    name: str
    state: str
    """ready, cordoned, not-ready or lost (as `scheduler nodes` shows), and ``drained`` when marked so."""
    drained: bool
    cpus: float
    cpus_used: float
    memory_bytes: int
    memory_used: int
    gpus: int
    gpus_used: int
    gpu_type: str | None
    jobs: tuple[str, ...] = ()
    """The jobs holding room there (deployed or running), by id: `scheduler nodes`' jobs."""


@dataclass(frozen=True)
class TenantView:
    tenant: str
    weight: float
    quota_gpus: int | None
    """None: unlimited."""
    quota_cpus: float | None
    quota_memory_bytes: int | None
    quota_jobs: int | None
    gpus: int
    """In use: what its admitted and running jobs hold."""
    cpus: float
    memory_bytes: int
    jobs: int
    queued: int


@dataclass(frozen=True)
class UsageRow:
    """One day's use by one tenant's jobs of one framework (FfDL's analytics), UTC days."""

    day: str
    """YYYY-MM-DD."""
    tenant: str
    framework: str
    jobs: int
    """Jobs submitted that day (the jobs the scheduler still holds: a deleted job leaves the figures)."""
    cpu_seconds: float
    """CPU-seconds reserved by its attempts that day: each attempt's CPUs, all learners, from its deploy to its end."""
    gpu_seconds: float


@dataclass(frozen=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    tenants: tuple[TenantView, ...]
    usage: tuple[UsageRow, ...]
    """Oldest day first, then tenant, then framework."""
    as_of: str
    """ISO-8601 UTC, a whole minute: running attempts are counted up to it, so the page, its CSV and `/metrics`
    read in the same minute show the same figures."""


def usage_totals(rows: Iterable[UsageRow]) -> dict[tuple[str, str], UsageRow]:
    """The rows summed over their days per (tenant, framework), in the rows' order: the sums the Cluster page shows
    and `/metrics` exports (``day`` empty), added in the same order so that they are equal to the last bit."""
    summed: dict[tuple[str, str], UsageRow] = {}
    for row in rows:
        seen = summed.get((row.tenant, row.framework))
        if seen is None:
            summed[(row.tenant, row.framework)] = UsageRow(
                "", row.tenant, row.framework, row.jobs, row.cpu_seconds, row.gpu_seconds
            )
        else:
            summed[(row.tenant, row.framework)] = UsageRow(
                "",
                row.tenant,
                row.framework,
                seen.jobs + row.jobs,
                seen.cpu_seconds + row.cpu_seconds,
                seen.gpu_seconds + row.gpu_seconds,
            )
    return summed
