"""The scheduler: the facade the API serves, and the loop that admits, deploys and monitors jobs.

One asyncio loop runs both. State changes happen under one lock; the backend's blocking calls (Docker,
Kubernetes) run in threads outside it. Every change is written to etcd before it is acted on, so a
restarted scheduler rebuilds the same queue and reservations (:meth:`Scheduler.rebuild`), leaves
running jobs undisturbed, and submits nothing twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.endpoints import Endpoints
from controller_sidecar.errors import SidecarError
from controller_sidecar.requirements import PackageIndex
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location, S3Settings
from controller_sidecar.status import Phase
from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.scheduler.admission.admit import AdmissionPolicy, AdmissionState, JobRecord, Requeued
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.config.policy import (
    SubmitPolicy,
    check_admissible,
    check_submission,
    host_folder,
    store_folder,
)
from learnerkit.scheduler.core.metrics import SchedulerMetrics
from learnerkit.scheduler.core.planning import Platform, endpoints_for, plan_job
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.views import job_view
from learnerkit.scheduler.errors import (
    BackendError,
    JobNotFoundError,
    JobStateError,
    ManifestTooLargeError,
    StoreUnavailableError,
    UnknownFileError,
)
from learnerkit.scheduler.facade import FileStream, JobView, LogStream, StoredFile
from learnerkit.scheduler.jobs.aggregate import aggregate
from learnerkit.scheduler.jobs.layout import job_location, model_location, outputs_prefix
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore, StoredJob
from learnerkit.scheduler.jobs.submission import ModelObject, SubmitOptions
from learnerkit.scheduler.manifest.model import FrameworkCatalog, JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.modelcode.archive import (
    DEFAULT_MAX_DIRECTORY_BYTES,
    DEFAULT_MAX_EXPANDED_BYTES,
    DEFAULT_MAX_MEMBERS,
    ModelSummary,
    check_model_archive,
)
from learnerkit.scheduler.modelcode.upload import StreamedUpload
from learnerkit.scheduler.modelcode.zipwindow import ZipWindow
from learnerkit.scheduler.outputs.files import list_outputs, metrics_history, open_output
from learnerkit.scheduler.outputs.logs import ShippedLog, list_log

LOGGER = logging.getLogger(__name__)
PARSES_AT_ONCE = 2
"""Manifests read side by side (each in a thread): more wait their turn without holding the event loop."""
STORES_KEPT = 16
"""S3 clients kept for log reads and model uploads, one per endpoint and account (making one costs tens of
milliseconds)."""
STARTUP_GRACE_S = 60.0
"""A learner whose sidecar never took its lease is lost only after this long (image start, etcd connect)."""
LEARNER_ENDED_MARGIN_S = 15.0
"""A learner container that ended while its sidecar, holding its lease, still reports PROCESSING fails the job
after the job's halt grace plus this. learner-run writes its exit record before it exits, and the sidecar, polling
for it every 0.1 s, then reports STORING (each retry of that delivery waits at most 5 s); a sidecar that is halting
(a halt asked for, or stopped by the kubelet once the learner container ended) waits the halt grace + 5 s for the
record and then reports a final status of its own. Either arrives within this grace, so a normal ending is never
failed: only a learner that never wrote the record (an image whose entrypoint is not learner-run) is."""


class Backend(Protocol):
    def nodes(self) -> list[Node]: ...
    def deploy(self, job: JobDeployment) -> None: ...
    def started(self, job_id: str, learners: int) -> bool: ...
    def sidecars_exited(self, job_id: str) -> dict[int, int]: ...
    def learners_ended(self, job_id: str) -> dict[int, int]: ...
    def teardown(self, job_id: str) -> None: ...
    def job_ids(self, instance: str) -> set[str]: ...


@dataclass(frozen=True)
class ModelLimits:
    max_expanded_bytes: int = DEFAULT_MAX_EXPANDED_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS
    max_directory_bytes: int = DEFAULT_MAX_DIRECTORY_BYTES


def _unknown_python(_image: str) -> str | None:
    return None


@dataclass(frozen=True)
class SchedulerOptions:
    platform: Platform
    catalog: FrameworkCatalog | None
    resolve_image: Callable[[JobManifest], str]
    policy: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    """Quotas and the ready timeout."""
    submit_policy: SubmitPolicy = field(default_factory=SubmitPolicy)
    """What tenants may submit; its default allows no object store, so every job is refused until one is named."""
    instance: str | None = None
    """This scheduler's instance id (``$LEARNERKIT_SCHEDULER_INSTANCE``); None: derived from the etcd endpoints and
    root at the first start, and kept in etcd. It labels what the scheduler deploys; its orphan sweep removes
    only what carries its own id."""
    model_limits: ModelLimits = field(default_factory=ModelLimits)
    """What a model archive may expand to (the sidecars' own limits)."""
    packages: PackageIndex = field(default_factory=PackageIndex)
    """Where sidecars install a model's requirements from (``LEARNERKIT_PIP_*``)."""
    python_of: Callable[[str], str | None] = _unknown_python
    """The Python version (``3.11``) of a learner image; None: the sidecar's own."""
    lease_ttl_s: float = 10.0
    """The sidecars' lease: a learner whose lease is gone this long (twice over) is lost."""
    interval_s: float = 0.5


class Scheduler:
    def __init__(
        self, store: JobStore, backend: Backend, options: SchedulerOptions, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.store = store
        self.backend = backend
        self.options = options
        self.clock = clock
        self.metrics = SchedulerMetrics()
        self.jobs: dict[str, Tracked] = {}
        self.admission = AdmissionState([], options.policy)
        self._parsing = asyncio.Semaphore(PARSES_AT_ONCE)
        self._lock = asyncio.Lock()
        """Guards the jobs' states and the admission state; taken inside a job's backend lock, never around it."""
        self._wake = asyncio.Event()
        self.instance = options.instance or ""
        """Set by :meth:`rebuild` (from etcd) before anything is deployed."""
        self._teardowns: set[str] = set()
        """Jobs whose teardown failed: retried by every step."""
        self._deploys: set[asyncio.Task[None]] = set()
        """Deploys in flight: they run beside the loop, whose steps go on monitoring the other jobs."""
        self._watching_since: float | None = None
        """Monotonic time since which every step succeeded; None after a failed one (etcd or the backend did not
        answer). Graces measured on what the steps saw start no earlier: an outage during which a sidecar could
        not deliver its status does not count against it."""
        self._stores: dict[tuple[str | None, str | None, str | None], S3Store] = {}
        self._stores_lock = threading.Lock()

    # -- startup ------------------------------------------------------------------------------------

    async def rebuild(self) -> None:
        """Load every job from etcd, re-reserve what admitted jobs hold, and remove orphans.

        A stored job that can no longer be admitted (a manifest this scheduler refuses) is FAILED with the
        reason instead of stopping the start.
        """
        derived = derive_instance(self.options.platform.etcd_endpoints, self.store.root)
        self.instance = await self.store.claim_instance(
            self.options.instance or derived, fixed=self.options.instance is not None
        )
        nodes = await asyncio.to_thread(self.backend.nodes)
        records: list[JobRecord] = []
        for stored in await self.store.load_all():
            tracked = await self._restore(stored)
            if tracked is None:
                continue
            self.jobs[stored.state.job_id] = tracked
            if tracked.state.stage is not Stage.DONE:
                records.append(_admission_record(tracked))
        self.admission = AdmissionState.rebuild(records, nodes, self.options.policy)
        running = {job_id for job_id, tracked in self.jobs.items() if tracked.active}
        for orphan in await asyncio.to_thread(self.backend.job_ids, self.instance) - running:
            LOGGER.warning("removing orphaned job %s from the backend", orphan)
            await asyncio.to_thread(self.backend.teardown, orphan)
        LOGGER.info("rebuilt %d jobs (%d running) from etcd", len(self.jobs), len(running))

    async def _restore(self, stored: StoredJob) -> Tracked | None:
        """The stored job as tracked; one that cannot be admitted is FAILED, and shown if its manifest allows."""
        options = SubmitOptions.from_raw(stored.spec.get("submission"))
        try:
            manifest = self._admissible(stored.manifest_text, stored.source, self.options.catalog, options.image)
            return Tracked(stored.state, manifest, stored.manifest_text, stored.source, options)
        except LearnerkitError as e:
            why = str(e)
        state = stored.state
        if state.stage is not Stage.DONE:
            reason = f"not admitted after a scheduler restart: {why}"
            failed = state.evolve(status=JobStatus.FAILED, stage=Stage.DONE, reason=reason, nodes=(), admitted_at=None)
            state = await self.store.save(failed)
            await self.store.trim(state.job_id)
            LOGGER.warning("job %s: %s", state.job_id, reason)
        try:
            shown = self._admissible(stored.manifest_text, stored.source, None, options.image)
        except LearnerkitError:
            LOGGER.warning("job %s: its stored manifest cannot be shown; it is left out", state.job_id)
            return None
        return Tracked(state, shown, stored.manifest_text, stored.source, options)

    async def _parse(self, text: str, source: str, image: str | None = None) -> JobManifest:
        """Refuse an oversized manifest unread; read the others in a thread, within the policy's time budget."""
        policy = self.options.submit_policy
        size = len(text.encode())
        if size > policy.max_manifest_bytes:
            raise ManifestTooLargeError(
                f"the manifest has {size} bytes; this scheduler reads at most {policy.max_manifest_bytes}"
            )
        async with self._parsing:
            return await asyncio.to_thread(
                parse_manifest,
                text,
                source,
                self.options.catalog,
                seconds=policy.parse_seconds,
                defaults=policy.defaults,
                image=image,
            )

    def _admissible(
        self, text: str, source: str, catalog: FrameworkCatalog | None, image: str | None = None
    ) -> JobManifest:
        manifest = parse_manifest(text, source, catalog, defaults=self.options.submit_policy.defaults, image=image)
        check_admissible(manifest, self.options.submit_policy, source)
        return manifest

    # -- the facade -------------------------------------------------------------------------------------

    async def submit(
        self,
        tenant: str,
        manifest_text: str,
        *,
        source: str = "manifest.yml",
        image: str | None = None,
        model: AsyncIterator[bytes] | None = None,
    ) -> JobView:
        """Check everything, store the model code, then store the job and queue it: a refused job leaves
        nothing behind (no record, no stored model)."""
        manifest = await self._parse(manifest_text, source, image)
        check_submission(manifest, tenant, self.options.submit_policy, source)
        await asyncio.to_thread(self.options.resolve_image, manifest)  # the image gate reads its records
        endpoints = endpoints_for(manifest, self.options.platform)  # refuses a results store the sidecar cannot use
        state = JobState(f"job-{uuid.uuid4().hex[:12]}", tenant, manifest.name, time.time())
        options = SubmitOptions(image=image)
        if model is not None:
            options = replace(options, model=await self._store_model(manifest, state.job_id, endpoints, model))
        tracked = Tracked(state, manifest, manifest_text, source, options)
        try:
            await self._record(tracked)
        finally:
            if options.model is not None and state.job_id not in self.jobs:  # not recorded: drop its model
                await asyncio.to_thread(
                    _delete_quietly, self._store_of(endpoints), options.model.bucket, options.model.key
                )
        self._wake.set()
        return job_view(tracked)

    async def _record(self, tracked: Tracked) -> None:
        """Store the new job in one transaction and queue it."""
        state = tracked.state
        async with self._lock:
            if not await self.store.create(state, _spec(tracked), tracked.manifest_text, tracked.source):
                raise JobStateError(f"job id {state.job_id} exists already")
            self.jobs[state.job_id] = tracked
            rejected = self.admission.submit(tracked.admission_job())
            if rejected is not None:
                await self._end(tracked, JobStatus.FAILED, rejected.message, release=True)

    async def _store_model(
        self, manifest: JobManifest, job_id: str, endpoints: Endpoints, model: AsyncIterator[bytes]
    ) -> ModelObject:
        """Store the model as it arrives, keeping what the archive check reads of it, then check it: a refused
        one is dropped, and the object exists only when every check has passed."""
        bucket, key = model_location(manifest, job_id)
        upload = StreamedUpload(self._store_of(endpoints), bucket, key)
        limits = self.options.model_limits
        window = ZipWindow(limits.max_directory_bytes)
        stored = False
        try:
            async for chunk in model:
                window.feed(chunk)
                await upload.write(chunk)
            check = asyncio.to_thread(_check_streamed, window, limits)
            summary, _ = await asyncio.gather(check, upload.sent())  # the check while the last parts go
            await upload.finish()
            stored = True
        except SidecarError as e:
            raise StoreUnavailableError(f"storing the model code at s3://{bucket}/{key} failed: {e}") from e
        finally:
            if not stored:  # refused, failed or cancelled: no part may stay behind
                await upload.abort()
        return ModelObject(bucket, key, upload.size, bool(summary.requirements))

    async def list_jobs(self, tenant: str) -> list[JobView]:
        return [
            job_view(t)
            for t in sorted(self.jobs.values(), key=lambda t: t.state.submitted_at)
            if t.state.tenant == tenant
        ]

    async def get(self, tenant: str, job_id: str) -> JobView:
        return job_view(self._owned(tenant, job_id))

    async def halt(self, tenant: str, job_id: str) -> JobView:
        tracked = self._owned(tenant, job_id)
        async with self._lock:
            status = tracked.state.status
            if status.terminal:
                raise JobStateError(f"job {job_id} is {status.value}: nothing to halt")
            if tracked.state.stage is Stage.QUEUED:
                await self._end(tracked, JobStatus.HALTED, "halted while queued", release=True)
            else:
                await self.store.request_halt(job_id)
                tracked.state = await self.store.save(tracked.state.evolve(reason="halt requested"))
        self._wake.set()
        return job_view(tracked)

    async def resume(self, tenant: str, job_id: str) -> JobView:
        tracked = self._owned(tenant, job_id)
        async with self._lock:
            if tracked.state.status not in (JobStatus.HALTED, JobStatus.FAILED):
                raise JobStateError(f"job {job_id} is {tracked.state.status.value}: only HALTED or FAILED jobs resume")
            await self._requeue(tracked, "resumed", restart=False)
        self._wake.set()
        return job_view(tracked)

    async def cancel(self, tenant: str, job_id: str) -> JobView:
        """CANCELLED at once; the teardown then waits for a deploy in flight, which itself removes what it made."""
        tracked = self._owned(tenant, job_id)
        async with self._lock:
            if tracked.state.status.terminal and tracked.state.stage is Stage.DONE:
                raise JobStateError(f"job {job_id} is {tracked.state.status.value} already")
            await self._end(tracked, JobStatus.CANCELLED, "cancelled", release=True)
        async with tracked.backend_lock:
            try:
                await self._teardown(job_id)
            except BackendError as e:
                LOGGER.warning("job %s: teardown failed; the next steps retry it: %s", job_id, e)
        await self.store.trim(job_id)  # what the sidecars wrote until they were stopped
        return job_view(tracked)

    async def logs(
        self, tenant: str, job_id: str, *, learner_id: int = 1, offset: int = 0, tail: int | None = None
    ) -> LogStream:
        """Lists the log's parts now (and, for ``tail``, reads back from the end until the lines are found);
        the bytes are fetched only as the stream's chunks are taken, from the parts they lie in."""
        tracked = self._owned(tenant, job_id)
        finished = tracked.state.status.terminal and tracked.state.stage is Stage.DONE
        self._check_learner(tracked, learner_id)
        log = await asyncio.to_thread(self._list_log, tracked, learner_id)
        start = offset
        if tail is not None:
            start = max(start, await asyncio.to_thread(log.tail_start, tail))
        end = max(start, log.size)
        return LogStream(log.chunks(start, end), start, end, finished)

    async def metrics_history(self, tenant: str, job_id: str, *, learner_id: int = 1) -> FileStream:
        """The learner's stored metrics.jsonl of every attempt so far (its sidecar stores it as it grows)."""
        tracked = self._owned(tenant, job_id)
        self._check_learner(tracked, learner_id)
        return await asyncio.to_thread(
            metrics_history, self._store(tracked), self._job_location(tracked), tracked.state.attempt, learner_id
        )

    async def outputs(self, tenant: str, job_id: str, *, what: str = "all") -> list[StoredFile]:
        tracked = self._owned(tenant, job_id)
        try:
            return await asyncio.to_thread(list_outputs, self._store(tracked), self._job_location(tracked), what)
        except ValueError as e:
            raise ConfigError(str(e)) from e

    async def open_output(self, tenant: str, job_id: str, path: str) -> FileStream:
        tracked = self._owned(tenant, job_id)
        stream = await asyncio.to_thread(open_output, self._store(tracked), self._job_location(tracked), path)
        if stream is None:
            raise UnknownFileError(f"job {job_id} stored no file {path!r}")
        return stream

    def render_metrics(self) -> bytes:
        return self.metrics.render()

    # -- the loop ---------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self.guarded_step()
                self._wake.clear()
                waits = [asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())]
                await asyncio.wait(waits, timeout=self.options.interval_s, return_when=asyncio.FIRST_COMPLETED)
                for wait in waits:
                    wait.cancel()
        finally:
            await self.deploys_done()

    async def deploys_done(self) -> None:
        """Wait for the deploys in flight (a stopping scheduler leaves none half-made)."""
        while self._deploys:
            await asyncio.gather(*self._deploys, return_exceptions=True)

    async def guarded_step(self) -> None:
        """One step; an error of etcd or the backend is logged, and the next step starts over."""
        try:
            await self.step()
        except LearnerkitError as e:
            # etcd or the backend answered with an error (an outage, a container gone meanwhile): the next
            # step starts over from what is recorded; nothing of the failed one was half-applied.
            LOGGER.warning("scheduling step failed (retrying next step): %s", e)
            self._watching_since = None

    async def step(self) -> None:
        now = self.clock.wall()
        if self._watching_since is None:
            self._watching_since = self.clock.monotonic()
        # Jobs are monitored side by side; one whose deploy (or teardown) is in flight waits for the next step.
        active = [t for t in self.jobs.values() if t.active and not t.backend_lock.locked()]
        outcomes = await asyncio.gather(*(self._monitor(t, now) for t in active), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome  # the others ran to their end: nothing is left half-applied
        await self._retry_teardowns()
        async with self._lock:
            requeued = self.admission.tick(now)
        for timed_out in requeued:
            await self._requeue_timed_out(self.jobs[timed_out.job_id], timed_out)
        async with self._lock:
            started = time.perf_counter()
            result = self.admission.schedule(now)
            self.metrics.scheduling_pass_seconds.observe(time.perf_counter() - started)
            for job_id, why in result.rejected.items():
                await self._end(self.jobs[job_id], JobStatus.FAILED, why.message, release=True)
            for job_id, reason in result.waiting.items():
                tracked = self.jobs[job_id]
                if tracked.state.reason != str(reason):
                    tracked.state = await self.store.save(tracked.state.evolve(reason=str(reason)))
        # Deploys run side by side (the engine creates containers concurrently) and beside the next steps.
        for admitted in result.admitted:
            task = asyncio.create_task(self._guarded_deploy(self.jobs[admitted.job_id], admitted.nodes, now))
            self._deploys.add(task)
            task.add_done_callback(self._deploys.discard)
        self._observe()

    async def _guarded_deploy(self, tracked: Tracked, nodes: tuple[str, ...], now: float) -> None:
        """A deploy in its own task: an error of etcd is logged as a failed step's would be."""
        try:
            await self._deploy(tracked, nodes, now)
        except LearnerkitError as e:
            LOGGER.warning(
                "deploying job %s failed (the next steps go on from what is recorded): %s", tracked.state.job_id, e
            )
            self._watching_since = None

    async def _requeue_timed_out(self, tracked: Tracked, requeued: Requeued) -> None:
        async with tracked.backend_lock:
            await self._teardown(requeued.job_id)
            async with self._lock:
                if tracked.state.stage is Stage.DONE:
                    return  # cancelled or halted meanwhile
                tracked.new_attempt()
                tracked.state = await self.store.save(
                    tracked.state.evolve(
                        status=JobStatus.QUEUED,
                        stage=Stage.QUEUED,
                        nodes=(),
                        admitted_at=None,
                        timeouts=requeued.timeouts,
                        not_before=requeued.not_before,
                        reason=f"learners did not start within {self.options.policy.ready_timeout_s:.0f}s; requeued",
                    ),
                    clear_learners=True,
                )

    async def _deploy(self, tracked: Tracked, nodes: tuple[str, ...], now: float) -> None:
        """Deploy an admitted job; its backend lock keeps a cancel's teardown from meeting a half-made job."""
        async with tracked.backend_lock:
            plan = await self._plan(tracked, nodes, now)
            if plan is None:
                return
            try:
                await asyncio.to_thread(self.backend.deploy, plan)
            except BackendError as e:
                self.metrics.deploy_failures.inc()
                async with self._lock:
                    if tracked.state.stage is not Stage.DONE:
                        await self._end(tracked, JobStatus.FAILED, f"deploy failed: {e}", release=True)
                return
            async with self._lock:
                ended = tracked.state.stage is Stage.DONE
                if not ended:
                    tracked.state = await self.store.save(tracked.state.evolve(reason=""))
            if ended:
                await self._teardown(tracked.state.job_id)  # cancelled while the deploy ran: remove what it made

    async def _plan(self, tracked: Tracked, nodes: tuple[str, ...], now: float) -> JobDeployment | None:
        """The admitted job's deployment, recorded as deploying; None when it ended meanwhile or was refused."""
        try:
            image = await asyncio.to_thread(self.options.resolve_image, tracked.manifest)  # the image gate, again
            refused = ""
        except LearnerkitError as e:
            image, refused = "", str(e)
        async with self._lock:
            state = tracked.state
            if state.stage is not Stage.QUEUED:
                return None  # cancelled or halted since the pass admitted it
            self.metrics.admission_wait.observe(max(0.0, now - max(state.submitted_at, state.not_before)))
            plan: JobDeployment | None = None
            try:
                if not refused:
                    mount = _data_mount(tracked.manifest, self.options.submit_policy)
                    python = self.options.python_of(image) if tracked.options.model else None
                    packages = replace(self.options.packages, python_version=python)
                    plan = plan_job(
                        tracked.manifest, state, self.options.platform, image, mount, tracked.options, packages
                    )
            except LearnerkitError as e:
                refused = str(e)
            if plan is None:
                await self._end(tracked, JobStatus.FAILED, f"deploy refused: {refused}", release=True)
                return None
            tracked.state = await self.store.save(
                state.evolve(
                    status=JobStatus.PENDING, stage=Stage.DEPLOYED, nodes=nodes, admitted_at=now, reason="deploying"
                ),
                clear_learners=True,
            )
        return replace(plan, instance=self.instance)

    async def _monitor(self, tracked: Tracked, now: float) -> None:
        state = tracked.state
        # Which sidecars have exited, before their statuses are read: a sidecar writes its final status
        # before it exits, so one that exited without it in the records read after did fail.
        exited = await asyncio.to_thread(self.backend.sidecars_exited, state.job_id)
        records, alive, metrics = await self.store.learner_records(state.job_id)
        tracked.records, tracked.alive, tracked.metrics = records, alive, metrics
        learners = tracked.manifest.resources.learners
        if state.stage is Stage.DEPLOYED and await asyncio.to_thread(self.backend.started, state.job_id, learners):
            async with self._lock:
                if tracked.state.stage is Stage.DEPLOYED:
                    self.admission.mark_running(state.job_id)
                    tracked.state = await self.store.save(tracked.state.evolve(stage=Stage.RUNNING))
        watching = self._watching_for_exit(tracked)
        # Read only while some sidecar waits for an exit record: no API call for jobs downloading or storing.
        ended = await asyncio.to_thread(self.backend.learners_ended, state.job_id) if watching else {}
        lost = {
            **self._ended_without_exit_record(tracked, watching, ended),
            **self._lost_learners(tracked, exited, now),
        }
        result = aggregate(learners, records, first_sequence=state.first_sequence, lost=lost)
        async with tracked.backend_lock:
            async with self._lock:
                if tracked.state.stage not in (Stage.DEPLOYED, Stage.RUNNING):
                    return  # cancelled meanwhile
                if not result.status.terminal:
                    if result.status is not tracked.state.status:
                        tracked.state = await self.store.save(tracked.state.evolve(status=result.status))
                    return
            # Outside the scheduler's lock: the API and the other jobs' steps go on while the engine removes it.
            await self._teardown(state.job_id)
            async with self._lock:
                if tracked.state.stage not in (Stage.DEPLOYED, Stage.RUNNING):
                    return  # cancelled during the teardown
                extensions = tracked.manifest.extensions
                if (
                    result.status is JobStatus.FAILED
                    and extensions.auto_resume
                    and tracked.state.restarts < extensions.max_restarts
                ):
                    await self._requeue(tracked, f"restarting after: {result.reason}", restart=True)
                else:
                    await self._end(tracked, result.status, result.reason, release=True)

    def _lost_learners(self, tracked: Tracked, exited: dict[int, int], now: float) -> dict[int, str]:
        """Learners whose sidecar died: its container exited without a final status, or its lease expired."""
        state, lost = tracked.state, {}
        for n in range(1, tracked.manifest.resources.learners + 1):
            record = tracked.records.get(n)
            final = record is not None and record.sequence >= state.first_sequence and record.phase.terminal
            if final:
                continue
            if n in exited:
                lost[n] = f"its sidecar exited with status {exited[n]} before reporting a final status"
            elif n in tracked.alive:
                tracked.seen_alive.add(n)
                tracked.missing_since.pop(n, None)
            elif n in tracked.seen_alive:
                since = tracked.missing_since.setdefault(n, now)
                if now - since > 2 * self.options.lease_ttl_s:
                    lost[n] = "its sidecar's lease expired"
            elif (
                state.admitted_at is not None
                and now - state.admitted_at > STARTUP_GRACE_S + 2 * self.options.lease_ttl_s
                and (record is None or record.sequence < state.first_sequence)
            ):
                lost[n] = f"its sidecar never reported within {STARTUP_GRACE_S:.0f}s"
        return lost

    def _watching_for_exit(self, tracked: Tracked) -> set[int]:
        """Learners whose sidecar, holding its lease, reports PROCESSING this attempt: it waits for learner-run's
        exit record (before PROCESSING it has not started the learner's command, or looked for the record)."""
        first = tracked.state.first_sequence
        return {
            n
            for n, record in tracked.records.items()
            if record.sequence >= first and record.phase is Phase.PROCESSING and n in tracked.alive
        }

    def _ended_without_exit_record(self, tracked: Tracked, watching: set[int], ended: dict[int, int]) -> dict[int, str]:
        """Learners whose container ended while their sidecar kept waiting for the exit record, past the grace.

        On Docker the sidecar notices this itself (the learner's cgroup empties) and reports first; on Kubernetes
        it cannot, and this is what ends the job. The grace is measured on the scheduler's monotonic clock from
        the first step that saw it, kept in memory only: a restarted scheduler starts it again, later, never
        sooner, and the container stays ended (``restartPolicy: Never``; an exited Docker container), so the job
        still ends.
        """
        now = self.clock.monotonic()
        watched_from = self._watching_since if self._watching_since is not None else now
        grace = tracked.manifest.extensions.halt_grace + LEARNER_ENDED_MARGIN_S
        for n in set(tracked.ended_since) - (watching & ended.keys()):
            del tracked.ended_since[n]  # the sidecar moved on (STORING, a final status) or lost its lease
        lost: dict[int, str] = {}
        for n in sorted(watching & ended.keys()):
            since = max(tracked.ended_since.setdefault(n, now), watched_from)
            if now - since > grace:
                lost[n] = (
                    f"the learner container ended (exit code {ended[n]}) without learner-run's exit record: "
                    "is learner-run the image's entrypoint?"
                )
        return lost

    # -- transitions (called under the lock) ---------------------------------------------------------------

    async def _end(self, tracked: Tracked, status: JobStatus, reason: str, *, release: bool) -> None:
        if release and tracked.state.job_id in {r.job.job_id for r in self.admission.records()}:
            self.admission.release(tracked.state.job_id)
        tracked.state = await self.store.save(
            tracked.state.evolve(status=status, stage=Stage.DONE, reason=reason, nodes=(), admitted_at=None)
        )
        await self.store.trim(tracked.state.job_id)
        LOGGER.info("job %s: %s %s", tracked.state.job_id, status.value, reason)

    async def _requeue(self, tracked: Tracked, reason: str, *, restart: bool) -> None:
        """A new attempt of the job, restoring the latest checkpoint of the last one."""
        job_id = tracked.state.job_id
        if job_id in {r.job.job_id for r in self.admission.records()}:
            self.admission.release(job_id)
        tracked.new_attempt()
        tracked.state = await self.store.save(
            tracked.state.evolve(
                status=JobStatus.QUEUED,
                stage=Stage.QUEUED,
                attempt=tracked.state.attempt + 1,
                resume_from_attempt=tracked.state.attempt,
                restarts=tracked.state.restarts + (1 if restart else 0),
                nodes=(),
                admitted_at=None,
                timeouts=0,
                not_before=0.0,
                reason=reason,
            ),
            clear_learners=True,
            clear_halt=True,
        )
        self.admission.submit(tracked.admission_job())

    async def _teardown(self, job_id: str) -> None:
        """Remove everything of the job from the backend; after a failure, steps retry it while the job is done."""
        try:
            await asyncio.to_thread(self.backend.teardown, job_id)
        except BackendError:
            self._teardowns.add(job_id)
            raise
        self._teardowns.discard(job_id)

    async def _retry_teardowns(self) -> None:
        for job_id in sorted(self._teardowns):
            tracked = self.jobs[job_id]
            if tracked.state.stage is not Stage.DONE:
                self._teardowns.discard(job_id)  # deployed again: its own transitions tear it down
                continue
            async with tracked.backend_lock:
                await self._teardown(job_id)

    # -- helpers -------------------------------------------------------------------------------------------

    def _owned(self, tenant: str, job_id: str) -> Tracked:
        tracked = self.jobs.get(job_id)
        if tracked is None or tracked.state.tenant != tenant:
            raise JobNotFoundError(f"no job {job_id!r}")
        return tracked

    def _store_of(self, endpoints: Endpoints) -> S3Store:
        """A kept S3 client of the job's store account (log reads and model uploads run in worker threads)."""
        account = (endpoints.s3_endpoint_url, endpoints.s3_access_key, endpoints.s3_secret_key)
        with self._stores_lock:
            store = self._stores.get(account)
            if store is None:
                store = S3Store(S3Settings(endpoint_url=account[0], access_key=account[1], secret_key=account[2]))
                if len(self._stores) >= STORES_KEPT:
                    self._stores.pop(next(iter(self._stores)))
                self._stores[account] = store
        return store

    def _store(self, tracked: Tracked) -> S3Store:
        """A client of the job's results store (shared per account)."""
        return self._store_of(endpoints_for(tracked.manifest, self.options.platform))

    def _job_location(self, tracked: Tracked) -> S3Location:
        bucket, prefix = job_location(tracked.manifest, tracked.state.job_id)
        return S3Location(bucket, prefix)

    def _check_learner(self, tracked: Tracked, learner_id: int) -> None:
        if not 1 <= learner_id <= tracked.manifest.resources.learners:
            raise ConfigError(f"job {tracked.state.job_id} has learners 1..{tracked.manifest.resources.learners}")

    def _list_log(self, tracked: Tracked, learner_id: int) -> ShippedLog:
        store = self._store(tracked)
        bucket, prefix = outputs_prefix(tracked.manifest, tracked.state.job_id, tracked.state.attempt, learner_id)
        try:
            return list_log(store, S3Location(bucket, f"{prefix}logs/learner.log.part-"))
        except ValueError as e:
            raise LearnerkitError(f"job {tracked.state.job_id}: learner {learner_id}'s log: {e}") from e

    def _observe(self) -> None:
        queued = sum(1 for t in self.jobs.values() if t.state.stage is Stage.QUEUED)
        gpus = sum(t.manifest.resources.gpus * t.manifest.resources.learners for t in self.jobs.values() if t.active)
        self.metrics.observe_jobs((t.state.status for t in self.jobs.values()), queued, gpus)


def _data_mount(manifest: JobManifest, policy: SubmitPolicy) -> str | None:
    """The host folder of a ``mount_volume`` training data store, checked again (its links may have changed)."""
    store = manifest.training_data_store
    if store.type != "mount_volume":
        return None
    return host_folder(store_folder(store), policy)


def _check_streamed(window: ZipWindow, limits: ModelLimits) -> ModelSummary:
    return check_model_archive(
        window.reader(),
        name="model",
        max_expanded_bytes=limits.max_expanded_bytes,
        max_members=limits.max_members,
        max_directory_bytes=limits.max_directory_bytes,
    )


def _delete_quietly(store: S3Store, bucket: str, key: str) -> None:
    """Remove what a failed upload may have left; the store failing again is logged, not raised over the cause."""
    try:
        store.delete(bucket, key)
    except SidecarError as e:
        LOGGER.warning("could not remove s3://%s/%s after a failed upload: %s", bucket, key, e)


def derive_instance(etcd_endpoints: str, root: str) -> str:
    """An instance id from where the scheduler keeps its jobs: the same etcd and root give the same id."""
    endpoints = ",".join(sorted(e.strip() for e in etcd_endpoints.split(",") if e.strip()))
    return "lk-" + hashlib.sha256(f"{endpoints}|{root}".encode()).hexdigest()[:12]


def _spec(tracked: Tracked) -> dict[str, object]:
    return {
        "job_id": tracked.state.job_id,
        "tenant": tracked.state.tenant,
        "manifest": tracked.manifest.to_dict(),
        "submission": tracked.options.to_raw(),
    }


def _admission_record(tracked: Tracked) -> JobRecord:
    state = tracked.state
    return JobRecord(
        tracked.admission_job(),
        state.stage,
        state.nodes,
        state.admitted_at,
        state.timeouts,
        state.not_before,
        state.reason,
    )
