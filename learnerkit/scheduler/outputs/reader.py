"""A job's stored logs, metric histories and files, read back for the API from its results store.

The caller names the job (its manifest, state and the store's endpoints) and has checked that the tenant owns
it; the reads run in worker threads. A store that does not answer (after the host's retries) is
`StoreUnavailableError`, the API's 503 with Retry-After; the tenant's answer names no address of it, the log does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.errors import TransientError
from controller_sidecar.settings import S3Location
from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.errors import StoreUnavailableError, UnknownFileError
from learnerkit.scheduler.facade import FileStream, LogStream, StoredFile
from learnerkit.scheduler.jobs.layout import job_location, outputs_prefix
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.outputs.files import list_outputs, metrics_after, metrics_history, open_output, open_stored
from learnerkit.scheduler.outputs.logs import ShippedLog, list_log

LOGGER = logging.getLogger(__name__)


@contextmanager
def _store_outage(job_id: str) -> Iterator[None]:
    try:
        yield
    except TransientError as e:
        LOGGER.warning("job %s: its object store does not answer: %s", job_id, e)
        raise StoreUnavailableError(f"job {job_id}: its object store does not answer; try again shortly") from e


class OutputsReader:
    """Reads through kept clients of the jobs' stores (shared with the model uploads)."""

    def __init__(self, clients: S3Clients) -> None:
        self.clients = clients

    async def logs(
        self,
        endpoints: Endpoints,
        manifest: JobManifest,
        state: JobState,
        learner_id: int,
        *,
        offset: int = 0,
        tail: int | None = None,
        attempt: int | None = None,
        length: int | None = None,
    ) -> LogStream:
        """Lists the log's parts of ``attempt`` (default: the job's latest) now (and, for ``tail``, reads back
        from the end until the lines are found); the bytes are fetched only as the stream's chunks are taken,
        from the parts they lie in. An earlier attempt's log is finished: nothing is added to it any more."""
        number = state.attempt if attempt is None else attempt
        finished = number < state.attempt or (state.status.terminal and state.stage is Stage.DONE)
        with _store_outage(state.job_id):
            log = await asyncio.to_thread(self._list_log, endpoints, manifest, state, number, learner_id)
            start = offset
            if tail is not None:
                start = max(start, await asyncio.to_thread(log.tail_start, tail))
        end = max(start, log.size if length is None else min(log.size, start + length))
        return LogStream(log.chunks(start, end), start, end, finished and end >= log.size, number, log.size)

    async def metrics_history(
        self, endpoints: Endpoints, manifest: JobManifest, state: JobState, learner_id: int
    ) -> FileStream:
        """The learner's stored metrics.jsonl of every attempt so far (its sidecar stores it as it grows)."""
        store, job = self.clients.of(endpoints), _job(manifest, state)
        with _store_outage(state.job_id):
            return await asyncio.to_thread(metrics_history, store, job, state.attempt, learner_id)

    async def metrics_after(
        self, endpoints: Endpoints, manifest: JobManifest, state: JobState, attempt: int, offset: int
    ) -> tuple[bytes, int] | None:
        """Learner 1's stored metrics.jsonl of ``attempt`` past ``offset`` (:func:`metrics_after`)."""
        store, job = self.clients.of(endpoints), _job(manifest, state)
        with _store_outage(state.job_id):
            return await asyncio.to_thread(metrics_after, store, job, attempt, 1, offset)

    async def outputs(
        self, endpoints: Endpoints, manifest: JobManifest, state: JobState, what: str
    ) -> list[StoredFile]:
        """The job's stored files of kind ``what``."""
        try:
            store, job = self.clients.of(endpoints), _job(manifest, state)
            with _store_outage(state.job_id):
                return await asyncio.to_thread(list_outputs, store, job, what)
        except ValueError as e:
            raise ConfigError(str(e)) from e

    async def open_output(self, endpoints: Endpoints, manifest: JobManifest, state: JobState, path: str) -> FileStream:
        """One stored file of the job."""
        store, job = self.clients.of(endpoints), _job(manifest, state)
        with _store_outage(state.job_id):
            stream = await asyncio.to_thread(open_output, store, job, path)
        if stream is None:
            raise UnknownFileError(f"job {state.job_id} stored no file {path!r}")
        return stream

    async def open_object(self, endpoints: Endpoints, state: JobState, bucket: str, key: str) -> FileStream:
        """An object of the job's results store outside the job's prefix (its evaluation data): the caller has
        checked that the job's records name it."""
        store = self.clients.of(endpoints)
        with _store_outage(state.job_id):
            stream = await asyncio.to_thread(open_stored, store, bucket, key)
        if stream is None:
            raise UnknownFileError(f"job {state.job_id}: the store no longer has s3://{bucket}/{key}")
        return stream

    def _list_log(
        self, endpoints: Endpoints, manifest: JobManifest, state: JobState, attempt: int, learner_id: int
    ) -> ShippedLog:
        store = self.clients.of(endpoints)
        bucket, prefix = outputs_prefix(manifest, state.job_id, attempt, learner_id)
        try:
            return list_log(store, S3Location(bucket, f"{prefix}logs/learner.log.part-"))
        except ValueError as e:
            raise LearnerkitError(f"job {state.job_id}: learner {learner_id}'s log: {e}") from e


def _job(manifest: JobManifest, state: JobState) -> S3Location:
    bucket, prefix = job_location(manifest, state.job_id)
    return S3Location(bucket, prefix)
