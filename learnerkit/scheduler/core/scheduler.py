"""The scheduler: the facade the API serves, over the control loop that admits, deploys and monitors jobs.

Both run on one asyncio loop and share one :class:`Shared` state. A verb changes a job's record (in etcd first)
and wakes the loop; the loop (:class:`ControlLoop`, started by whoever hosts the scheduler) acts on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.endpoints import Endpoints
from learnerkit.common.errors import ConfigError
from learnerkit.scheduler.admission.admit import AdmissionState
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.protocol import Backend
from learnerkit.scheduler.config.policy import check_submission
from learnerkit.scheduler.core.analytics import UsageCollector, as_of, usage_rows
from learnerkit.scheduler.core.evaluationdata import open_evaluation_data
from learnerkit.scheduler.core.fabricviews import cluster_view, queue_view
from learnerkit.scheduler.core.loop import ControlLoop
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import endpoints_for
from learnerkit.scheduler.core.registering import ModelRegistering, catalog_registrar
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.sweepdriver import SweepDriver
from learnerkit.scheduler.core.sweepverbs import SweepVerbs
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import Transitions, evaluated_job
from learnerkit.scheduler.core.uploads import abort_abandoned_uploads
from learnerkit.scheduler.core.views import job_view
from learnerkit.scheduler.errors import BackendError, JobNotFoundError, JobStateError, ManifestTooLargeError
from learnerkit.scheduler.evaluations.plan import EvaluatedJob
from learnerkit.scheduler.evaluations.record import EvaluationRound
from learnerkit.scheduler.evaluations.runner import EvaluationRunner, RoundSigned
from learnerkit.scheduler.fabric import ClusterView, QueueView
from learnerkit.scheduler.facade import (
    EvaluationReports,
    FileStream,
    JobPage,
    JobQuery,
    JobView,
    LogStream,
    StoredFile,
    StoreKeys,
    SweepView,
)
from learnerkit.scheduler.jobs.layout import results_store
from learnerkit.scheduler.jobs.listing import ListedJob, select
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobState, JobStatus, now_iso
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.evaluations import parse_evaluations_text
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.manifest.redact import redact_credentials
from learnerkit.scheduler.modelcode.receive import delete_quietly, receive_model
from learnerkit.scheduler.outputs.reader import OutputsReader
from learnerkit.scheduler.sweeps.trialids import trial_of

LOGGER = logging.getLogger(__name__)
PARSES_AT_ONCE = 2
"""Manifests read side by side (each in a thread): more wait their turn without holding the event loop."""
MODEL_MOVE_WAIT_S = 60.0
"""An alias move waits this long for another move of the same model to end (each takes seconds: a proof)."""


class Scheduler:
    """Implements :class:`~learnerkit.scheduler.facade.SchedulerFacade`; :attr:`loop` is its control loop."""

    def __init__(
        self, store: JobStore, backend: Backend, options: SchedulerOptions, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.clients = S3Clients()
        """S3 clients of the jobs' stores, for model uploads, evaluation reports and the reads of :attr:`reader`."""
        evaluations = EvaluationRunner(store, backend, self.clients, options.platform, options.resolve_evaluator)
        self.shared = Shared(store, backend, options, clock, AdmissionState([], options.policy), evaluations)
        self.transitions = Transitions(self.shared)
        registrar = (
            catalog_registrar(options.model_catalog, options.provenance.signer)
            if options.model_catalog and options.provenance
            else None
        )
        self.registering = ModelRegistering(self, self._tenant_of, self._record_reason, registrar)
        evaluations.round_ended = self._evaluation_round_ended
        self.loop = ControlLoop(self.shared, self.transitions)
        self.reader = OutputsReader(self.clients)
        self._parsing = asyncio.Semaphore(PARSES_AT_ONCE)
        self.loop.driver = SweepDriver(
            self.shared, self.transitions, self.clients, self.reader, self._parse, self._record
        )
        self.sweeps = SweepVerbs(self.loop.driver, self.halt, self._sweep_options)
        shared = self.shared
        shared.metrics.operator_registry.register(
            UsageCollector(lambda: usage_rows(list(shared.jobs.values()), as_of(shared.clock.wall())))
        )

    async def _evaluation_round_ended(self, job: EvaluatedJob, settled: EvaluationRound, signed: RoundSigned) -> None:
        """The round's statement is signed, then the model registered where the manifest's ``catalog:`` asks."""

        async def then() -> None:
            await signed()
            await self.registering.round_signed(job, settled)

        await self.transitions.provenancing.evaluation_round_ended(job, settled, then)

    def _tenant_of(self, job_id: str) -> str | None:
        tracked = self.shared.jobs.get(job_id)
        return None if tracked is None else tracked.state.tenant

    async def _record_reason(self, job_id: str, reason: str) -> None:
        async with self.shared.lock:
            tracked = self.shared.jobs.get(job_id)
            if tracked is not None:
                tracked.state = await self.shared.store.save(tracked.state.evolve(reason=reason))

    async def abort_abandoned_uploads(self) -> int:
        """Abort the multipart uploads that ended jobs left open in their stores (:func:`abort_abandoned_uploads`);
        run once the jobs are restored."""
        shared = self.shared
        return await abort_abandoned_uploads(
            list(shared.jobs.values()),
            self.clients,
            shared.options.platform,
            grace_s=shared.options.abandoned_upload_grace_s,
            now=shared.clock.wall(),
        )

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
        shared = self.shared
        manifest = await self._parse(manifest_text, source, tenant, image)
        check_submission(manifest, tenant, shared.options.submit_policy, source)
        resolved = await asyncio.to_thread(shared.options.resolve_image, manifest)  # the gate reads its records
        endpoints = endpoints_for(manifest, shared.options.platform)  # refuses a results store the sidecar cannot use
        state = JobState(f"job-{uuid.uuid4().hex[:12]}", tenant, manifest.name, time.time())
        options = SubmitOptions(image=image, results_bucket=shared.options.submit_policy.defaults.results_bucket)
        if model is not None:
            limits = replace(shared.options.model_limits, locked=shared.options.locked_of(resolved))
            stored = await receive_model(self.clients.of(endpoints), manifest, state.job_id, limits, model)
            options = replace(options, model=stored)
        tracked = Tracked(state, manifest, manifest_text, source, options)
        try:
            await self._record(tracked)
        finally:
            if options.model is not None and state.job_id not in shared.jobs:  # not recorded: drop its model
                await asyncio.to_thread(
                    delete_quietly, self.clients.of(endpoints), options.model.bucket, options.model.key
                )
        shared.wake.set()
        return job_view(tracked)

    async def _sweep_options(
        self,
        tenant: str,
        manifest: JobManifest,
        source: str,
        sweep_id: str,
        model: AsyncIterator[bytes] | None,
        image: str | None,
    ) -> SubmitOptions:
        """A sweep's trials are checked as one job submit is, and share its model code, stored once."""
        shared = self.shared
        check_submission(manifest, tenant, shared.options.submit_policy, source)
        resolved = await asyncio.to_thread(shared.options.resolve_image, manifest)
        endpoints = endpoints_for(manifest, shared.options.platform)
        options = SubmitOptions(image=image, results_bucket=shared.options.submit_policy.defaults.results_bucket)
        if model is None:
            return options
        limits = replace(shared.options.model_limits, locked=shared.options.locked_of(resolved))
        stored = await receive_model(self.clients.of(endpoints), manifest, sweep_id, limits, model)
        return replace(options, model=stored)

    async def submit_sweep(
        self,
        tenant: str,
        search_text: str,
        manifest_text: str,
        *,
        search_source: str = "search.yml",
        manifest_source: str = "manifest.yml",
        image: str | None = None,
        model: AsyncIterator[bytes] | None = None,
    ) -> SweepView:
        return await self.sweeps.submit(
            tenant,
            search_text,
            manifest_text,
            search_source=search_source,
            manifest_source=manifest_source,
            image=image,
            model=model,
        )

    async def list_sweeps(self, tenant: str) -> list[SweepView]:
        return await self.sweeps.list(tenant)

    async def get_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        return await self.sweeps.get(tenant, sweep_id)

    async def halt_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        return await self.sweeps.halt(tenant, sweep_id)

    async def resume_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        return await self.sweeps.resume(tenant, sweep_id)

    async def cancel_sweep(self, tenant: str, sweep_id: str) -> SweepView:
        return await self.sweeps.cancel(tenant, sweep_id)

    def hold_model(self, tenant: str, name: str, by: str) -> AbstractAsyncContextManager[None]:
        holder = json.dumps({"by": by, "since": now_iso()})
        return self.shared.store.model_lock(tenant, name, holder, MODEL_MOVE_WAIT_S)

    async def _parse(self, text: str, source: str, tenant: str, image: str | None = None) -> JobManifest:
        """Refuse an oversized manifest unread; read the others in a thread, within the policy's time budget."""
        options = self.shared.options
        policy = options.submit_policy
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
                options.catalog,
                seconds=policy.parse_seconds,
                defaults=policy.defaults,
                image=image,
                tenant=tenant,
            )

    async def _record(self, tracked: Tracked) -> None:
        """Store the new job in one transaction and queue it."""
        shared, state = self.shared, tracked.state
        async with shared.lock:
            if not await shared.store.create(state, _spec(tracked), tracked.manifest_text, tracked.source):
                raise JobStateError(f"job id {state.job_id} exists already")
            shared.jobs[state.job_id] = tracked
            rejected = shared.admission.submit(tracked.admission_job())
            if rejected is not None:
                await self.transitions.end(tracked, JobStatus.FAILED, rejected.message, release=True)

    async def queue(self, tenant: str) -> QueueView:
        async with self.shared.lock:
            return queue_view(self.shared.admission, self.shared.jobs, tenant)

    async def cluster(self) -> ClusterView:
        shared = self.shared
        drained, states = await shared.marks.drained(), await shared.marks.states()
        async with shared.lock:
            tenants = {t.state.tenant for t in shared.jobs.values()}
            return cluster_view(shared.admission, shared.jobs, drained, states, tenants, shared.clock.wall())

    async def list_jobs(self, tenant: str) -> list[JobView]:
        rounds = self.shared.evaluations.rounds
        return [
            job_view(t, rounds.get(t.state.job_id), listing=True)
            for t in sorted(self.shared.jobs.values(), key=lambda t: t.state.submitted_at)
            if t.state.tenant == tenant
        ]

    async def page_jobs(self, tenant: str, query: JobQuery) -> JobPage:
        """Filters and sorts light rows of every job of the tenant; only the page's jobs get a full view."""
        jobs = self.shared.jobs
        listed = [
            ListedJob(
                job_id=t.state.job_id,
                name=t.state.name,
                status=t.state.status.value,
                framework=t.manifest.framework.name,
                submitted_at=t.state.submitted_at,
                reason=t.state.reason,
            )
            for t in jobs.values()
            if t.state.tenant == tenant
        ]
        chosen = select(listed, query)
        rounds = self.shared.evaluations.rounds
        views = tuple(job_view(jobs[job_id], rounds.get(job_id), listing=True) for job_id in chosen.job_ids)
        next_token = chosen.cursors[-1] if chosen.more and chosen.cursors else None
        return JobPage(views, chosen.cursors, next_token, chosen.total)

    async def get(self, tenant: str, job_id: str) -> JobView:
        return job_view(self._owned(tenant, job_id), self.shared.evaluations.rounds.get(job_id))

    async def manifest(self, tenant: str, job_id: str) -> str:
        return await asyncio.to_thread(redact_credentials, self._owned(tenant, job_id).manifest_text)

    async def evaluate(self, tenant: str, job_id: str, text: str, *, source: str = "evaluations.yml") -> JobView:
        shared, tracked = self.shared, self._owned(tenant, job_id)
        if tracked.state.status is not JobStatus.COMPLETED:
            raise JobStateError(
                f"job {job_id} is {tracked.state.status.value}: only a COMPLETED job's model is evaluated"
            )
        of = trial_of(job_id)
        sweep = self.sweeps.driver.sweeps.get(of.sweep_id) if of is not None else None
        if of is not None and sweep is not None and not sweep.state.status.terminal:
            # A paused trial's model trains on at a promotion, which needs the credentials a round's end deletes.
            raise JobStateError(
                f"job {job_id} is trial {of.trial} of sweep {of.sweep_id}, which is {sweep.state.status.value}: "
                "a promotion may train its model on; the sweep evaluates its best trial when it is done"
            )
        if len(text.encode()) > shared.options.submit_policy.max_manifest_bytes:
            raise ManifestTooLargeError(f"{source} is larger than a manifest may be")
        stores = [store.id for store in tracked.manifest.data_stores]
        specs = await asyncio.to_thread(parse_evaluations_text, text, source, stores)
        await shared.evaluations.begin(evaluated_job(tracked, shared), tracked.state.attempt, specs)
        shared.wake.set()
        return job_view(tracked, shared.evaluations.rounds.get(job_id))

    async def evaluation_reports(self, tenant: str, job_id: str) -> EvaluationReports:
        self._owned(tenant, job_id)
        return await self.shared.evaluations.reports(job_id)

    async def halt(self, tenant: str, job_id: str) -> JobView:
        shared, tracked = self.shared, self._owned(tenant, job_id)
        async with shared.lock:
            status = tracked.state.status
            if status.terminal:
                raise JobStateError(f"job {job_id} is {status.value}: nothing to halt")
            if tracked.state.stage is Stage.QUEUED:
                await self.transitions.end(tracked, JobStatus.HALTED, "halted while queued", release=True)
            else:
                # A user's halt wins over a preemption under way: the job ends HALTED, not queued to resume.
                tracked.state = await shared.store.save(
                    tracked.state.evolve(reason="halt requested", halted_by_user=True)
                )
                await shared.store.request_halt(job_id)
        shared.wake.set()
        return job_view(tracked)

    async def resume(self, tenant: str, job_id: str) -> JobView:
        shared, tracked = self.shared, self._owned(tenant, job_id)
        async with shared.lock:
            if not tracked.state.status.resumable:
                raise JobStateError(f"job {job_id} is {tracked.state.status.value}: only HALTED or FAILED jobs resume")
            await self.transitions.requeue(tracked, "resumed", restart=False)
        shared.wake.set()
        return job_view(tracked)

    async def cancel(self, tenant: str, job_id: str) -> JobView:
        """CANCELLED at once; the teardown then waits for a deploy in flight, which itself removes what it made."""
        shared, tracked = self.shared, self._owned(tenant, job_id)
        async with shared.lock:
            if tracked.state.status.terminal and tracked.state.stage is Stage.DONE:
                raise JobStateError(f"job {job_id} is {tracked.state.status.value} already")
            await self.transitions.end(tracked, JobStatus.CANCELLED, "cancelled", release=True)
        async with tracked.backend_lock:
            try:
                await self.transitions.teardown(job_id)
            except BackendError as e:
                LOGGER.warning("job %s: teardown failed; the next steps retry it: %s", job_id, e)
        await shared.store.trim(job_id)  # what the sidecars wrote until they were stopped
        return job_view(tracked)

    async def delete(self, tenant: str, job_id: str) -> JobView:
        """The job's record (credentials included) leaves etcd and the scheduler; what it stored stays."""
        shared, tracked = self.shared, self._owned(tenant, job_id)
        async with tracked.backend_lock:
            if tracked.state.stage is not Stage.DONE:
                raise JobStateError(f"job {job_id} is {tracked.state.status.value}: cancel it before deleting it")
            if shared.evaluations.in_flight(job_id):
                raise JobStateError(f"job {job_id}: its evaluations are still running; delete it once they end")
            await self.transitions.teardown(job_id)  # nothing may be left that no record names
            async with shared.lock:
                await shared.store.delete(job_id)
                shared.jobs.pop(job_id, None)
                shared.evaluations.forget(job_id)
        return job_view(tracked)

    async def logs(
        self,
        tenant: str,
        job_id: str,
        *,
        learner_id: int = 1,
        offset: int = 0,
        tail: int | None = None,
        attempt: int | None = None,
        length: int | None = None,
    ) -> LogStream:
        tracked = self._owned(tenant, job_id)
        _check_learner(tracked, learner_id)
        latest = tracked.state.attempt
        if attempt is not None and not 1 <= attempt <= latest:
            raise ConfigError(f"attempt: job {job_id} has attempts 1..{latest}; got {attempt}")
        return await self.reader.logs(
            self._endpoints(tracked),
            tracked.manifest,
            tracked.state,
            learner_id,
            offset=offset,
            tail=tail,
            attempt=attempt,
            length=length,
        )

    async def metrics_history(self, tenant: str, job_id: str, *, learner_id: int = 1) -> FileStream:
        tracked = self._owned(tenant, job_id)
        _check_learner(tracked, learner_id)
        return await self.reader.metrics_history(self._endpoints(tracked), tracked.manifest, tracked.state, learner_id)

    async def outputs(
        self, tenant: str, job_id: str, *, what: str = "all", lent: StoreKeys | None = None
    ) -> list[StoredFile]:
        tracked = self._owned(tenant, job_id)
        return await self.reader.outputs(self._endpoints(tracked, lent), tracked.manifest, tracked.state, what)

    async def open_output(self, tenant: str, job_id: str, path: str, *, lent: StoreKeys | None = None) -> FileStream:
        tracked = self._owned(tenant, job_id)
        return await self.reader.open_output(self._endpoints(tracked, lent), tracked.manifest, tracked.state, path)

    async def open_evaluation_data(self, tenant: str, job_id: str, uri: str) -> FileStream:
        tracked = self._owned(tenant, job_id)
        writer = self.shared.options.provenance
        return await open_evaluation_data(self.reader, self._endpoints(tracked), tracked, writer, uri)

    def _owned(self, tenant: str, job_id: str) -> Tracked:
        tracked = self.shared.jobs.get(job_id)
        if tracked is None or tracked.state.tenant != tenant:
            raise JobNotFoundError(f"no job {job_id!r}")
        return tracked

    def _endpoints(self, tracked: Tracked, lent: StoreKeys | None = None) -> Endpoints:
        """The job's results store (its account's client is shared); with ``lent``, the tenant's keys of it (the
        store's location is still the job's own); none once its credentials are deleted and none are lent."""
        endpoints = None
        if lent is not None:
            endpoints = replace(
                endpoints_for(tracked.manifest, self.shared.options.platform),
                s3_access_key=lent.access_key,
                s3_secret_key=lent.secret_key,
            )
        elif not results_store(tracked.manifest).credentials:
            raise JobStateError(
                f"job {tracked.state.job_id} is {tracked.state.status.value}: the scheduler deleted its store's "
                f"credentials when it ended and has restarted since; read its results from the store with your "
                "keys (or lend them for a model's registration: `learnerkit model register --lend-store-keys`)"
            )
        return endpoints or endpoints_for(tracked.manifest, self.shared.options.platform)


def _check_learner(tracked: Tracked, learner_id: int) -> None:
    if not 1 <= learner_id <= tracked.manifest.resources.learners:
        raise ConfigError(f"job {tracked.state.job_id} has learners 1..{tracked.manifest.resources.learners}")


def _spec(tracked: Tracked) -> dict[str, object]:
    return {
        "job_id": tracked.state.job_id,
        "tenant": tracked.state.tenant,
        "manifest": tracked.manifest.to_dict(),
        "submission": tracked.options.to_raw(),
    }
