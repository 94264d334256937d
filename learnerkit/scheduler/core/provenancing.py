"""A job's provenance, written beside the loop when the job ends COMPLETED, HALTED or FAILED
(`learnerkit.scheduler.provenance.writer`), and each evaluation round's once its last evaluation settles
(`learnerkit.scheduler.provenance.evaluationwriter`): the documents are gathered, signed and stored in a worker
thread, so the loop and the API never wait on the object store. A job's writes run one after another, in the
order they were asked for, so a round's statement finds the job's factsheet to list itself in.

A job's provenance is written at least once whatever fails: its end puts a due mark in etcd
(``/learnerkit/jobs.provenance-due/<job>``) in the step that ends it, before its status is saved; the write (the
sidecars' records read from etcd, the documents stored in the job's bucket) is retried with backoff while either
store is out, and the mark is deleted only once the documents are stored. A scheduler stopped meanwhile leaves the
mark, and the next one writes what is due as it starts (:meth:`Provenancing.resume`)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from controller_sidecar import keys
from controller_sidecar.errors import SidecarError
from controller_sidecar.recordchannel import RecordsRead, assemble
from learner.evaluation.spec import spec_to_dict
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.backends.protocol import ReportsImageDigest
from learnerkit.scheduler.core.planning import endpoints_for
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.evaluations.plan import EvaluatedJob, results_folder
from learnerkit.scheduler.evaluations.record import EvaluationRound
from learnerkit.scheduler.evaluations.runner import RoundSigned
from learnerkit.scheduler.jobs.layout import job_location
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.provenance.evaluationwriter import (
    EvaluationProvenanceWriter,
    SettledEvaluation,
    SettledRound,
)
from learnerkit.scheduler.provenance.writer import FinishedJob

LOGGER = logging.getLogger(__name__)
PROVENANCE_OF = frozenset({JobStatus.COMPLETED, JobStatus.HALTED, JobStatus.FAILED})
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
WRITE_ERRORS = (LearnerkitError, SidecarError, OSError, ValueError, KeyError)


async def ran_digest(backend: object, job_id: str) -> str:
    """The learner image's digest the backend reports the job ran, where it reports one (Kubernetes: the
    scheduler's engine is not the cluster's); empty where it does not, yet or at all (asked again next pass)."""
    if not isinstance(backend, ReportsImageDigest):
        return ""
    try:
        return await asyncio.to_thread(backend.learner_image_digest, job_id)
    except BackendError as e:
        LOGGER.warning("job %s: the learner image's digest cannot be read yet: %s", job_id, e)
        return ""


class Provenancing:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.instance = shared.options.instance or ""
        """Set by the loop's rebuild, as it claims its instance id."""
        self.clients = S3Clients()
        self._writes: dict[str, asyncio.Task[None]] = {}
        """Each job's latest write, while it runs: the next one of the job waits for it."""
        self._stopping = asyncio.Event()
        """Set by :meth:`drain`: retries end, leaving their due marks to the next start."""

    async def mark_due(self, tracked: Tracked, status: JobStatus) -> None:
        """Called under the shared lock before the job's end is saved: its provenance is due (a store outage
        raises, and the step that ends the job is tried again)."""
        if self.shared.options.provenance is None or status not in PROVENANCE_OF:
            return
        due = json.dumps({"attempt": tracked.state.attempt, "status": status.value})
        await self.shared.store.etcd.put(keys.provenance_due_key(tracked.state.job_id, self.shared.store.root), due)

    def keeps_records(self, tracked: Tracked) -> bool:
        """Whether the job's provenance records must stay after its trim: a statement is still to be made of them
        (its writer deletes them once signed), or the job may be resumed and signed at its later end."""
        status = tracked.state.status
        return status.resumable or (self.shared.options.provenance is not None and status in PROVENANCE_OF)

    async def job_ended(self, tracked: Tracked) -> None:
        """Called under the shared lock as the job ends, its last attempt closed."""
        if self.shared.options.provenance is None or tracked.state.status not in PROVENANCE_OF:
            return
        self._queue_job(tracked)

    async def resume(self) -> None:
        """After a restart: write the provenance still due (the scheduler stopped before it was stored)."""
        store = self.shared.store
        if self.shared.options.provenance is None:
            return
        prefix = keys.provenance_due_prefix(store.root)
        for key in await store.etcd.get_prefix(prefix):
            tracked = self.shared.jobs.get(key.removeprefix(prefix))
            if tracked is not None and tracked.state.status in PROVENANCE_OF:
                LOGGER.info("job %s: its provenance is due; writing it", tracked.state.job_id)
                self._queue_job(tracked)
            else:  # deleted, or resumed since: its next end marks it again
                await store.etcd.delete(key)

    def _queue_job(self, tracked: Tracked) -> None:
        writer = self.shared.options.provenance
        assert writer is not None
        state, manifest, image, resolve = tracked.state, tracked.manifest, tracked.deployed_image, None
        attempts, digest = tuple(tracked.attempts), tracked.ran_digest
        if not image:  # ended before a deploy of this scheduler process: the gate resolves it again
            resolve = self.shared.options.resolve_image
        store = self.clients.of(endpoints_for(manifest, self.shared.options.platform))
        etcd, root, job_id = self.shared.store.etcd, self.shared.store.root, state.job_id

        def gather_and_write(records: RecordsRead) -> None:
            deployed = resolve(manifest) if resolve else image
            job = FinishedJob(state, manifest, deployed, attempts, self.instance, ran_digest=digest, records=records)
            writer.write(store, job)

        async def write_once() -> None:
            found = await etcd.get_prefix(keys.provenance_prefix(job_id, root) + "records/")
            await asyncio.to_thread(gather_and_write, assemble(found, job_id, root))
            due = await etcd.get(keys.provenance_due_key(job_id, root))
            if due is None or json.loads(due[0]).get("attempt") == state.attempt:  # not a later end's mark
                await etcd.delete(keys.provenance_due_key(job_id, root))
            if not state.status.resumable:  # never written again: the records are signed and can go
                await etcd.delete_prefix(keys.provenance_prefix(job_id, root) + "records/")

        self._chain(job_id, lambda: self._retrying(job_id, write_once))

    async def _retrying(self, job_id: str, write_once: Callable[[], Awaitable[None]]) -> None:
        """``write_once`` until it succeeds, with backoff, or until the scheduler stops (the due mark stays)."""
        delay = RETRY_FIRST_S
        while True:
            try:
                await write_once()
            except WRITE_ERRORS as e:
                LOGGER.warning("job %s: its provenance is not written yet (again in %.0f s): %s", job_id, delay, e)
            else:
                return
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
            except TimeoutError:
                delay = min(delay * 2, RETRY_MAX_S)
            else:
                LOGGER.warning("job %s: stopping with its provenance due; the next start writes it", job_id)
                return

    async def evaluation_round_ended(self, job: EvaluatedJob, settled: EvaluationRound, signed: RoundSigned) -> None:
        """Called as the round's last evaluation is settled (and at a start, for a round whose statement was not
        stored): the round's signed statement, where the job has a provenance (the scheduler signs); ``signed`` is
        awaited once it is stored (or at once, with nothing to sign)."""
        writer = self.shared.options.provenance
        if writer is None:
            await signed()
            return
        bucket, prefix = job_location(job.manifest, job.job_id)
        evaluations = tuple(
            SettledEvaluation(
                name=outcome.name,
                kind=outcome.kind,
                verdict=outcome.outcome,
                message=outcome.message,
                failures=outcome.failures,
                spec=spec_to_dict(spec),
                image=outcome.image,
                folder=results_folder(job, settled.round, spec.name)[1].removeprefix(prefix),
            )
            for spec, outcome in zip(settled.specs, settled.outcomes, strict=True)
        )
        round_ = SettledRound(job.job_id, bucket, prefix, settled.round, settled.attempt, evaluations, self.instance)
        signer = EvaluationProvenanceWriter(writer.signer, writer.describe_image)
        store = self.clients.of(job.endpoints)
        what = f"the provenance of evaluation round {round_.round}"
        self._queue(job.job_id, lambda: signer.write(store, round_), what, then=signed)

    def writing(self, job_id: str) -> bool:
        """Whether a provenance write of the job is under way."""
        return job_id in self._writes

    def _queue(self, job_id: str, work: Callable[[], object], what: str, *, then: RoundSigned | None = None) -> None:
        """``work`` in a worker thread after the job's writes before it; ``then`` once it succeeded."""

        async def write() -> None:
            try:
                await asyncio.to_thread(work)
            except WRITE_ERRORS:
                LOGGER.exception("job %s: %s was not written", job_id, what)
                return
            if then is not None:
                await then()

        self._chain(job_id, write)

    def _chain(self, job_id: str, write: Callable[[], Awaitable[None]]) -> None:
        """Run ``write`` once the job's writes before it are done."""
        before = self._writes.get(job_id)

        async def chained() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            await write()

        task = asyncio.create_task(chained(), name=f"provenance of {job_id}")
        self._writes[job_id] = task
        task.add_done_callback(lambda done: self._done(job_id, done))

    def _done(self, job_id: str, task: asyncio.Task[None]) -> None:
        if self._writes.get(job_id) is task:
            del self._writes[job_id]

    async def drain(self) -> None:
        """Wait for the writes in flight (the loop's shutdown); those retrying give up, their marks kept."""
        self._stopping.set()
        while pending := [task for task in self._writes.values() if not task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)
