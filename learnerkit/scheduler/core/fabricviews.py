"""The facade's queue and cluster views (`learnerkit.scheduler.fabric`), read from the admission state, the jobs'
records and their attempts: nothing here decides anything, and nothing of another tenant is named to a tenant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from learnerkit.scheduler.admission.admit import AdmissionState
from learnerkit.scheduler.admission.freeing import PRIORITY, QUOTA, kind_of, what_frees
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.analytics import as_of, usage_rows
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.fabric import (
    PREEMPTIONS_SHOWN,
    ClusterView,
    NodeView,
    PreemptionView,
    QueuedJobView,
    QueueView,
    TenantView,
)
from learnerkit.scheduler.jobs.attempts import AttemptEnd
from learnerkit.scheduler.nodes.listing import holders

DRAIN = "drain"


def queue_view(admission: AdmissionState, jobs: Mapping[str, Tracked], tenant: str) -> QueueView:
    """The tenant's queued jobs in the next pass's order, each with its reason, its places and what frees it."""
    queued = admission.queued()
    own: list[QueuedJobView] = []
    others = 0
    for place, entry in enumerate(queued, start=1):
        job = entry.job
        if job.tenant != tenant:
            others += 1
            continue
        tracked = jobs[job.job_id]
        kind = kind_of(entry.reason)
        last = tracked.attempts[-1] if tracked.attempts else None
        if last is not None and last.ended_by is AttemptEnd.DRAINED and kind not in (QUOTA, PRIORITY):
            kind = DRAIN  # moved off a drained node: waits for room elsewhere
        own.append(
            QueuedJobView(
                job_id=job.job_id,
                name=tracked.state.name,
                priority=job.priority,
                status=tracked.state.status.value,
                kind=kind,
                reason=tracked.state.reason or str(entry.reason),
                frees=what_frees(entry.reason, admission.cluster),
                place_in_tenant=len(own) + 1,
                place_in_queue=place,
                others_ahead=others,
                submitted_at=tracked.state.submitted_at_iso,
            )
        )
    return QueueView(tenant, tuple(own), len(queued), tuple(preemptions(jobs.values(), tenant)))


def _named(tracked: Tracked | None, tenant: str) -> tuple[str, bool]:
    if tracked is None:
        return "a job no longer held", False
    if tracked.state.tenant == tenant:
        return tracked.state.job_id, True
    return f"a job of priority {tracked.manifest.extensions.priority} of another tenant", False


def preemptions(jobs: Iterable[Tracked], tenant: str) -> list[PreemptionView]:
    """The preemptions whose victim or preemptor is the tenant's, newest first: from the victims' attempts that
    ended PREEMPTED (kept in etcd with the job; the log ends with the jobs deleted)."""
    held = {t.state.job_id: t for t in jobs}
    found: list[PreemptionView] = []
    for victim in held.values():
        for attempt in victim.attempts:
            if attempt.ended_by is not AttemptEnd.PREEMPTED:
                continue
            preemptor = held.get(attempt.preempted_by) if attempt.preempted_by else None
            if victim.state.tenant != tenant and (preemptor is None or preemptor.state.tenant != tenant):
                continue
            victim_said, victim_own = _named(victim, tenant)
            preemptor_said, preemptor_own = _named(preemptor, tenant)
            if preemptor is None and attempt.preempted_by and victim_own:
                preemptor_said = f"job {attempt.preempted_by}, no longer held"
            found.append(
                PreemptionView(
                    at=attempt.ended_at or "",
                    victim=victim_said,
                    victim_own=victim_own,
                    preemptor=preemptor_said,
                    preemptor_own=preemptor_own,
                    attempt=attempt.number,
                    steps_lost=attempt.steps_lost,
                    work_lost_s=attempt.work_lost_s,
                )
            )
    found.sort(key=lambda p: p.at, reverse=True)
    return found[:PREEMPTIONS_SHOWN]


def cluster_view(
    admission: AdmissionState,
    jobs: Mapping[str, Tracked],
    drained: frozenset[str],
    states: Mapping[str, str],
    tenants: Iterable[str],
    at_wall: float,
) -> ClusterView:
    """Every node's capacity and use, every tenant's quota, weight and use, and the usage analytics at ``at_wall``'s
    minute; ``tenants``: those to show beside the ones holding or waiting for room and those with a quota."""
    cluster, policy = admission.cluster, admission.policy
    held = holders(t.state for t in jobs.values())
    nodes = []
    for name, node in sorted(cluster.nodes.items()):
        free = cluster.free(name)
        nodes.append(
            NodeView(
                name=name,
                state=states.get(name, "ready"),
                drained=name in drained,
                cpus=node.cpus,
                cpus_used=(node.millicpus - free.millicpus) / 1000,
                memory_bytes=node.memory_bytes,
                memory_used=node.memory_bytes - free.memory_bytes,
                gpus=node.gpus,
                gpus_used=node.gpus - free.gpus,
                gpu_type=node.gpu_type,
                jobs=tuple(j.job_id for j in held.get(name, ())),
            )
        )
    in_use = admission.in_use()
    queued: dict[str, int] = {}
    for tracked in jobs.values():
        if tracked.state.stage is Stage.QUEUED:
            queued[tracked.state.tenant] = queued.get(tracked.state.tenant, 0) + 1
    names = sorted({*tenants, *in_use, *queued, *policy.quotas})
    views = []
    for name in names:
        quota, use = policy.quota(name), in_use.get(name)
        views.append(
            TenantView(
                tenant=name,
                weight=policy.weights.of(name),
                quota_gpus=quota.gpus,
                quota_cpus=quota.cpus,
                quota_memory_bytes=quota.memory_bytes,
                quota_jobs=quota.jobs,
                gpus=use.gpus if use else 0,
                cpus=use.millicpus / 1000 if use else 0.0,
                memory_bytes=use.memory_bytes if use else 0,
                jobs=use.jobs if use else 0,
                queued=queued.get(name, 0),
            )
        )
    at = as_of(at_wall)
    rows = usage_rows(list(jobs.values()), at)
    return ClusterView(tuple(nodes), tuple(views), tuple(rows), at.isoformat().replace("+00:00", "Z"))
