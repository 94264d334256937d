"""Admission: which queued jobs get the cluster's capacity now, and why the others wait.

One scheduling pass (:meth:`AdmissionState.schedule`) walks the queue in order (higher priority first; within a
priority, the tenant furthest below its weighted fair share first, :mod:`~learnerkit.scheduler.admission.fairshare`;
within a tenant, earlier submission first) and, for each job whose backoff has passed:

1. **Quota.** A tenant's admitted and running GPUs, CPUs, memory and jobs never exceed its quota. What the
   tenant's jobs still waiting ahead need is *held*: a later job of the same tenant is admitted only if it
   fits the quota beside them, so it can never take quota that a job ahead of it needs.
2. **Head of line, per pool.** Once a job waits for capacity in a pool (a GPU type, or CPU-only room),
   the pool is blocked for the rest of the pass: later jobs that need it wait "behind N higher-priority
   jobs", so a big job is never starved by a stream of small ones. Jobs for other pools still go ahead
   (backfill), since they cannot take what the blocked job waits for; CPU-only learners then avoid the
   nodes of blocked GPU pools. A job that asks for GPUs of any type blocks every GPU pool while it waits, and
   is placed only in GPU pools nobody waits for. A job backing off after a ready timeout blocks nothing.
3. **Gang placement** (:mod:`learnerkit.scheduler.admission.placement`): every learner is placed or nothing is
   reserved. A job that the same heuristic cannot place even on an empty cluster is rejected as
   unschedulable instead of waiting forever.

An admitted job must have all learners running within ``ready_timeout_s`` (the caller reports it with
:meth:`mark_running`); otherwise :meth:`tick` releases its reservation and requeues it, in its old place,
with an exponential backoff. Time is always passed in. The state is rebuilt from job records alone
(:meth:`AdmissionState.rebuild`), so nothing here must survive a restart but those records.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from learnerkit.scheduler.admission.capacity import ANY_GPU, GIB, Cluster, Node, PoolKey, gpu_kind, millicores
from learnerkit.scheduler.admission.fairshare import Totals, Usage, Weights, fair_order
from learnerkit.scheduler.admission.placement import Placed, place_gang, release_gang
from learnerkit.scheduler.admission.queue import Job, JobQueue
from learnerkit.scheduler.admission.reasons import (
    BackingOff,
    BehindQueue,
    OverQuota,
    Reason,
    Unschedulable,
    WaitingForGpus,
    WaitingForRoom,
)
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.errors import InvalidRequestError, JobStateError, UnknownJobError

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Quota:
    """What one tenant's admitted and running jobs may hold together; None is unlimited."""

    gpus: int | None = None
    """GPUs over all GPU types."""
    cpus: float | None = None
    memory_bytes: int | None = None
    jobs: int | None = None
    """Admitted and running jobs."""


@dataclass(frozen=True)
class AdmissionPolicy:
    quotas: Mapping[str, Quota] = field(default_factory=dict)
    """Per tenant."""
    default_quota: Quota = field(default_factory=Quota)
    """The quota of a tenant not in ``quotas``."""
    ready_timeout_s: float = 600.0
    """An admitted job whose learners are not all running by then is requeued."""
    backoff_initial_s: float = 30.0
    """The wait after the first ready timeout; each further timeout multiplies it."""
    backoff_multiplier: float = 2.0
    backoff_max_s: float = 1800.0
    weights: Weights = field(default_factory=Weights)
    """Each tenant's weight in the fair share between tenants of equal priority."""

    def quota(self, tenant: str) -> Quota:
        return self.quotas.get(tenant, self.default_quota)

    def backoff_s(self, timeouts: int) -> float:
        """The wait after ready timeout number ``timeouts`` (1-based). No jitter: time is the caller's."""
        return min(self.backoff_max_s, self.backoff_initial_s * self.backoff_multiplier ** (timeouts - 1))


@dataclass(frozen=True)
class JobRecord:
    """What the scheduler needs of one job to rebuild its state (the job's record in etcd)."""

    job: Job
    stage: Stage
    nodes: tuple[str, ...] = ()
    """The node of each learner while admitted or running."""
    admitted_at: float | None = None
    timeouts: int = 0
    """Ready timeouts so far."""
    not_before: float = 0.0
    """Not admitted before this time (the backoff after a ready timeout)."""
    reason: str = ""
    """Why the job waits or was rejected, as of the last pass."""


@dataclass(frozen=True)
class Admitted:
    job_id: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class PassResult:
    admitted: list[Admitted]
    rejected: dict[str, Unschedulable]
    waiting: dict[str, Reason]
    """Every job still queued after the pass, with its reason."""


@dataclass(frozen=True)
class Queued:
    """A queued job and why it waits, as of the last pass: a `Reason` once a pass has judged it, the sentence
    its record kept before (after a restart or a rebuild)."""

    job: Job
    reason: Reason | str


@dataclass(frozen=True)
class InUse:
    """What a tenant's admitted and running jobs hold."""

    gpus: int = 0
    millicpus: int = 0
    memory_bytes: int = 0
    jobs: int = 0


@dataclass(frozen=True)
class Requeued:
    job_id: str
    timeouts: int
    not_before: float


@dataclass(slots=True)
class _Usage:
    """A tenant's resources in one sum: in use (admitted and running), or held for its waiting jobs."""

    gpus: int = 0
    millicpus: int = 0
    memory_bytes: int = 0
    jobs: int = 0

    def add(self, job: Job, sign: int = 1) -> None:
        self.gpus += sign * job.gpus
        self.millicpus += sign * job.millicpus
        self.memory_bytes += sign * job.memory_bytes
        self.jobs += sign


_NOTHING = _Usage()


def _over_quota(job: Job, quota: Quota, in_use: _Usage, held: _Usage) -> OverQuota | None:
    """The first quota the job would pass beside what is in use and held; GPUs count only for GPU jobs."""
    limits = (
        ("GPU", quota.gpus, job.gpus, in_use.gpus, held.gpus),
        (
            "CPU",
            None if quota.cpus is None else millicores(quota.cpus),
            job.millicpus,
            in_use.millicpus,
            held.millicpus,
        ),
        ("memory", quota.memory_bytes, job.memory_bytes, in_use.memory_bytes, held.memory_bytes),
        ("running-jobs", quota.jobs, 1, in_use.jobs, held.jobs),
    )
    for resource, limit, needs, used, waiting in limits:
        if limit is not None and needs and used + waiting + needs > limit:
            return OverQuota(job.tenant, limit, used, waiting, needs, resource)
    return None


def _quota_never_fits(job: Job, quota: Quota) -> str | None:
    """Why the job alone exceeds its tenant's quota; None when it does not."""
    tenant = repr(job.tenant)
    if quota.gpus is not None and job.gpus > quota.gpus:
        return f"needs {job.gpus} GPUs; tenant {tenant} GPU quota is {quota.gpus}"
    if quota.cpus is not None and job.millicpus > millicores(quota.cpus):
        return f"needs {job.millicpus / 1000:g} CPUs; tenant {tenant} CPU quota is {quota.cpus:g}"
    if quota.memory_bytes is not None and job.memory_bytes > quota.memory_bytes:
        return (
            f"needs {job.memory_bytes / GIB:.1f} GiB memory; tenant {tenant} memory quota is "
            f"{quota.memory_bytes / GIB:.1f} GiB"
        )
    if quota.jobs is not None and quota.jobs < 1:
        return f"tenant {tenant} may run no jobs (running-jobs quota {quota.jobs})"
    return None


@dataclass(slots=True)
class _Entry:
    job: Job
    stage: Stage
    nodes: tuple[str, ...] = ()
    admitted_at: float | None = None
    timeouts: int = 0
    not_before: float = 0.0
    reason: Reason | str = ""


class AdmissionState:
    """The queue, the reservations and the per-tenant GPU counts, kept consistent with each other."""

    def __init__(
        self, nodes: Iterable[Node], policy: AdmissionPolicy | None = None, closed: Collection[str] = ()
    ) -> None:
        self._nodes = tuple(nodes)
        self.policy = policy or AdmissionPolicy()
        self.cluster = Cluster(self._nodes, closed)
        """``closed``: nodes that take no new learner (:class:`Cluster`)."""
        self._empty = Cluster(self._nodes)
        """Never keeps a reservation: answers whether a job fits the cluster at all."""
        self._fits_empty: set[str] = set()
        """Jobs known to fit the cluster when empty, or queued again after they were admitted once: never
        rejected for the nodes' present shape."""
        self._entries: dict[str, _Entry] = {}
        self._queue = JobQueue()
        self._starting: dict[str, _Entry] = {}
        """Admitted jobs not yet reported running: what :meth:`tick` times out."""
        self._in_use: dict[str, _Usage] = {}
        self._totals = Totals.of(self._nodes)

    @classmethod
    def rebuild(
        cls,
        records: Iterable[JobRecord],
        nodes: Iterable[Node],
        policy: AdmissionPolicy | None = None,
        closed: Collection[str] = (),
    ) -> AdmissionState:
        """The state after a restart: admitted and running jobs re-reserve their nodes; queued jobs queue.

        A record whose nodes no longer exist or no longer have room (the cluster changed while the
        scheduler was down) is requeued. Queued jobs wait however the nodes have changed (:meth:`requeue`):
        each was admissible when it was submitted.
        """
        state = cls(nodes, policy, closed)
        records = sorted(records, key=lambda r: r.stage in (Stage.QUEUED, Stage.REJECTED))
        for record in records:
            entry = _Entry(
                record.job,
                record.stage,
                record.nodes,
                record.admitted_at,
                record.timeouts,
                record.not_before,
                record.reason,
            )
            if record.job.job_id in state._entries:
                raise InvalidRequestError(f"job {record.job.job_id!r} has two records")
            state._entries[record.job.job_id] = entry
            if record.stage in (Stage.DEPLOYED, Stage.RUNNING):
                if state._rereserve(entry):
                    continue
                LOGGER.warning("job %s: nodes %s no longer hold it; requeued", record.job.job_id, record.nodes)
                entry.stage, entry.nodes, entry.admitted_at = Stage.QUEUED, (), None
            if entry.stage is Stage.QUEUED:
                state._wait(entry)
        return state

    def submit(self, job: Job) -> Unschedulable | None:
        """Queue a job; a job that can never be admitted is rejected at once (and its reason returned)."""
        if job.job_id in self._entries:
            raise InvalidRequestError(f"job {job.job_id!r} exists already")
        entry = _Entry(job, Stage.QUEUED)
        self._entries[job.job_id] = entry
        return self._enqueue(entry)

    def requeue(self, job: Job) -> None:
        """Queue again a job that ran before (preempted, drained, its node lost, restarted): it waits for room
        and is never rejected for the nodes' present shape, since the only node that holds it may be back soon
        (a node not ready for a minute must not fail the jobs it held)."""
        if job.job_id in self._entries:
            raise InvalidRequestError(f"job {job.job_id!r} exists already")
        entry = _Entry(job, Stage.QUEUED)
        self._entries[job.job_id] = entry
        self._wait(entry)

    def schedule(self, now: float) -> PassResult:
        """One pass over the whole queue; see the module docstring for the policy."""
        cluster, policy, in_use = self.cluster, self.policy, self._in_use
        gpu_pools = [pool for pool in cluster.pools if pool is not None]
        blocked: dict[PoolKey, int] = {}
        held: dict[str, _Usage] = {}
        admitted: list[Admitted] = []
        rejected: dict[str, Unschedulable] = {}
        waiting: dict[str, Reason] = {}
        for job in fair_order(self._queue, self._usage_of, self._totals, policy.weights):
            entry = self._entries[job.job_id]
            reason: Reason
            if entry.not_before > now:
                entry.reason = waiting[job.job_id] = BackingOff(entry.timeouts, entry.not_before - now)
                continue
            tenant = job.tenant
            over = _over_quota(job, policy.quota(tenant), in_use.get(tenant, _NOTHING), held.get(tenant, _NOTHING))
            if over is not None:
                reason = over
            elif blocked and not blocked.keys().isdisjoint(job.pools):
                # The CPU pool is None: it sorts before every GPU pool, never compared with one.
                ahead, pool = max(
                    ((blocked.get(p, 0), p) for p in job.pools if p in blocked),
                    key=lambda pair: (pair[0], pair[1] or ""),
                )
                reason = BehindQueue(ahead, pool)
            else:
                open_pools = [p for p in cluster.pools if p not in blocked] if blocked else None
                placed = place_gang(cluster, job.learners, open_pools=open_pools)
                if isinstance(placed, Placed):
                    self._admit(entry, placed.nodes, now)
                    admitted.append(Admitted(job.job_id, placed.nodes))
                    continue
                if not self._fits_when_empty(job):
                    rejected[job.job_id] = self._reject(
                        entry, "its learners do not fit together even on an empty cluster"
                    )
                    continue
                reason = self._capacity_reason(job, placed.learner)
            if not isinstance(reason, OverQuota):
                waits_for = [*job.pools, *gpu_pools] if ANY_GPU in job.pools else job.pools
                for pool in waits_for:
                    blocked[pool] = blocked.get(pool, 0) + 1
            held.setdefault(tenant, _Usage()).add(job)
            entry.reason = waiting[job.job_id] = reason
        return PassResult(admitted, rejected, waiting)

    def mark_running(self, job_id: str) -> None:
        """Every learner of the admitted job runs: the ready timeout no longer applies."""
        entry = self._entry(job_id)
        if entry.stage is Stage.RUNNING:
            return
        if entry.stage is not Stage.DEPLOYED:
            raise JobStateError(f"job {job_id!r} is {entry.stage}, not admitted: it has no learners to run")
        entry.stage = Stage.RUNNING
        del self._starting[job_id]

    def release(self, job_id: str) -> None:
        """The job ended (completed, failed, halted, cancelled or deleted): free what it holds, forget it."""
        entry = self._entry(job_id)
        if entry.stage in (Stage.DEPLOYED, Stage.RUNNING):
            self._unreserve(entry)
        elif entry.stage is Stage.QUEUED:
            self._queue.remove(job_id)
        del self._entries[job_id]
        self._fits_empty.discard(job_id)

    def tick(self, now: float) -> list[Requeued]:
        """Requeue, with backoff, every admitted job whose learners missed the ready timeout."""
        requeued = []
        deadline = now - self.policy.ready_timeout_s
        for entry in list(self._starting.values()):
            if entry.admitted_at is not None and entry.admitted_at <= deadline:
                self._unreserve(entry)
                entry.timeouts += 1
                entry.not_before = now + self.policy.backoff_s(entry.timeouts)
                entry.reason = BackingOff(entry.timeouts, entry.not_before - now)
                self._queue.add(entry.job)
                requeued.append(Requeued(entry.job.job_id, entry.timeouts, entry.not_before))
        return requeued

    def record(self, job_id: str) -> JobRecord:
        e = self._entry(job_id)
        return JobRecord(e.job, e.stage, e.nodes, e.admitted_at, e.timeouts, e.not_before, str(e.reason))

    def records(self) -> list[JobRecord]:
        return [self.record(job_id) for job_id in sorted(self._entries)]

    def reason(self, job_id: str) -> str:
        """Why the job is not running ("" once admitted): what `job status` shows."""
        return str(self._entry(job_id).reason)

    def queued(self) -> list[Queued]:
        """The queued jobs in the order the next pass takes them (its fair order, read without admitting any)."""
        order = fair_order(self._queue, self._usage_of, self._totals, self.policy.weights)
        return [Queued(job, self._entries[job.job_id].reason) for job in order]

    def in_use(self) -> dict[str, InUse]:
        """Per tenant that holds any, what its admitted and running jobs hold."""
        return {
            tenant: InUse(use.gpus, use.millicpus, use.memory_bytes, use.jobs)
            for tenant, use in sorted(self._in_use.items())
            if use.jobs
        }

    def gpus_in_use(self, tenant: str) -> int:
        """The tenant's GPUs in admitted and running jobs."""
        return self._in_use.get(tenant, _NOTHING).gpus

    def _usage_of(self, tenant: str) -> Usage:
        held = self._in_use.get(tenant, _NOTHING)
        return Usage(held.gpus, held.millicpus, held.memory_bytes)

    def _entry(self, job_id: str) -> _Entry:
        try:
            return self._entries[job_id]
        except KeyError:
            raise UnknownJobError(f"no job {job_id!r}") from None

    def _enqueue(self, entry: _Entry) -> Unschedulable | None:
        why = self._never_fits(entry.job)
        if why is not None:
            return self._reject(entry, why)
        self._queue.add(entry.job)
        return None

    def _wait(self, entry: _Entry) -> None:
        self._queue.add(entry.job)
        self._fits_empty.add(entry.job.job_id)

    def _reject(self, entry: _Entry, why: str) -> Unschedulable:
        if entry.job.job_id in self._queue:
            self._queue.remove(entry.job.job_id)
        entry.stage = Stage.REJECTED
        reason = Unschedulable(why)
        entry.reason = reason
        return reason

    def _admit(self, entry: _Entry, nodes: tuple[str, ...], now: float) -> None:
        job = entry.job
        self._queue.remove(job.job_id)
        entry.stage, entry.nodes, entry.admitted_at, entry.reason = Stage.DEPLOYED, nodes, now, ""
        self._starting[job.job_id] = entry
        self._in_use.setdefault(job.tenant, _Usage()).add(job)

    def _unreserve(self, entry: _Entry) -> None:
        job = entry.job
        release_gang(self.cluster, job.learners, entry.nodes)
        self._in_use[job.tenant].add(job, -1)
        self._starting.pop(job.job_id, None)
        entry.stage, entry.nodes, entry.admitted_at = Stage.QUEUED, (), None

    def _rereserve(self, entry: _Entry) -> bool:
        job = entry.job
        if len(entry.nodes) != len(job.learners) or not all(n in self.cluster.nodes for n in entry.nodes):
            return False
        for done, (learner, node) in enumerate(zip(job.learners, entry.nodes, strict=True)):
            if not self.cluster.fits(node, learner):
                release_gang(self.cluster, job.learners[:done], entry.nodes[:done])
                return False
            self.cluster.reserve(node, learner)
        self._in_use.setdefault(job.tenant, _Usage()).add(job)
        if entry.stage is Stage.DEPLOYED:
            self._starting[job.job_id] = entry
        return True

    def _never_fits(self, job: Job) -> str | None:
        """Why the job can never be admitted, by cheap checks (no placement); None if it might be."""
        for learner_id, learner in enumerate(job.learners, start=1):  # 1-based, like LEARNER_ID
            if learner.gpus and not self.cluster.total_gpus(learner.pool):
                return f"no node has {gpu_kind(learner.pool)}"
            if not self.cluster.fits_empty(learner):
                kind = "node" if not learner.gpus else "GPU node" if learner.pool == ANY_GPU else f"{learner.pool} node"
                return f"learner {learner_id} needs {learner.describe()}; no {kind} is that large"
        for pool in job.pools:
            if pool is not None and job.gpus_in(pool) > self.cluster.total_gpus(pool):
                total = self.cluster.total_gpus(pool)
                return f"needs {job.gpus_in(pool)} {gpu_kind(pool)}; the cluster has {total}"
        return _quota_never_fits(job, self.policy.quota(job.tenant))

    def _fits_when_empty(self, job: Job) -> bool:
        if job.job_id in self._fits_empty:
            return True
        placed = place_gang(self._empty, job.learners)
        if not isinstance(placed, Placed):
            return False
        release_gang(self._empty, job.learners, placed.nodes)
        self._fits_empty.add(job.job_id)
        return True

    def _capacity_reason(self, job: Job, failed: int) -> Reason:
        learner = job.learners[failed]
        if learner.gpus:
            pool = learner.pool
            most_free, on_node = self.cluster.most_free_gpus(pool)
            free_total = self.cluster.free_gpus(pool)
            gpus = job.gpus_in(pool)
            if pool is not None and (learner.gpus > most_free or gpus > free_total):
                return WaitingForGpus(pool, gpus, len(job.learners), most_free, on_node, free_total)
        return WaitingForRoom(learner.describe(), len(job.learners), learner.millicpus, learner.memory_bytes)
