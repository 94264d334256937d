"""The sidecar's whole life for one learner, with shutdown designed first.

``PENDING -> DOWNLOADING -> PROCESSING -> STORING -> COMPLETED | FAILED | HALTED``. A halt (the job's
``halt`` key in etcd) or the sidecar's own SIGTERM both end in the same path: ``control/halt`` to the
learner, its exit awaited within the grace period, checkpoints stored, HALTED. Every step records its
progress under ``control/``, so a restarted sidecar goes on where the killed one stopped.

Start cost: the S3 client (boto3) is imported and made on a worker thread when the sidecar first needs it,
after its first status is queued, so the first status write never waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from controller_sidecar import keys
from controller_sidecar.atomicfile import write_atomic
from controller_sidecar.control import EXIT_FILE, LearnerExit, read_exit, signal_halt, signal_start
from controller_sidecar.errors import SidecarError, UnsafeFileError, UnsafePathError
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.evalmetrics import MetricsParser, parse_evaluation_metrics
from controller_sidecar.fence import Fence, LeaseLapsedError
from controller_sidecar.health import HEARTBEAT_FILE
from controller_sidecar.inputs import InputsReady, fetch_inputs, transfer_backoff
from controller_sidecar.jobspace import full_note
from controller_sidecar.learnercgroup import LearnerCgroup
from controller_sidecar.outcome import Outcome, outcome_of
from controller_sidecar.outputs import StoredTree, periodic_checkpoints, store_checkpoints, store_tree, stored_again
from controller_sidecar.processing import (
    METRICS_FILE,
    MetricsHistory,
    PublishMetrics,
    follow_metrics,
    make_log_shipper,
    sample_resources,
    ship_metrics,
    stored_metrics,
    tensorboard_events,
)
from controller_sidecar.progress import ProgressFile
from controller_sidecar.prom import SidecarMetrics
from controller_sidecar.promotion import follow_boundaries
from controller_sidecar.provenancerecord import RECORD_KEY, Digested, RecordError, SidecarRecord
from controller_sidecar.recordchannel import attempt_of, open_record, put_record
from controller_sidecar.resources import learner_alive
from controller_sidecar.retry import Backoff, retry_async
from controller_sidecar.s3objects import HashedObject
from controller_sidecar.settings import S3Settings, SidecarSettings
from controller_sidecar.status import ErrorCode, Phase, StatusRecord
from controller_sidecar.statusqueue import Deliver, StatusReporter

if TYPE_CHECKING:
    from controller_sidecar.s3store import S3Store

LOGGER = logging.getLogger(__name__)
EXIT_WAIT_MARGIN_S = 5.0
"""learner-run kills the command after its own grace period; this much longer we wait for its record."""
LEARNER_LOST_AFTER_S = 3.0
"""The learner's cgroup has been empty (or absent: it ended before the sidecar started) this long without a
``learner.exit``: the learner is gone."""
HEARTBEAT_S = 10.0
INPUTS_RECORD = "provenance-inputs.json"
"""In the control folder: the inputs' digests, from DOWNLOADING until the record goes out with the outputs."""


class Sidecar:
    def __init__(self, settings: SidecarSettings, terminate: asyncio.Event) -> None:
        self.settings = settings
        self.terminate = terminate
        """Set by SIGTERM/SIGINT: halt the learner, store what there is, exit before the deadline."""
        self.halted = asyncio.Event()
        """Set when the job's halt key appears."""
        self.metrics = SidecarMetrics(settings.job_id, settings.learner_id)
        self._store: asyncio.Task[S3Store] | None = None
        self.progress = ProgressFile(settings.dirs.control)
        self.cgroup = LearnerCgroup(settings.learner_cgroup_dir) if settings.learner_cgroup_dir else None
        rules = parse_evaluation_metrics(settings.evaluation_metrics)
        self.parser = MetricsParser(rules)
        self.events = tensorboard_events(rules, settings.dirs)
        self.history: MetricsHistory | None = None
        self._metrics_drained = asyncio.Event()
        """Set when the metric files were read a last time after PROCESSING: the history is complete."""
        self._terminated_at: float | None = None
        self._last_metrics: asyncio.Task[None] | None = None
        """Follows the learner's metrics; after PROCESSING it retries the last ones until etcd has them."""
        self._refused: UnsafeFileError | None = None
        self._etcd: EtcdStore | None = None
        """Set once connected: the provenance record goes there (:meth:`_put_record`)."""
        self.fence = Fence(attempt_of(settings.locations.results.prefix), settings.etcd.lease_ttl_s, self._fenced)
        """This attempt's right to write: lost when the scheduler moved the job on (the learner is then halted)."""

    async def run(self) -> Phase | None:
        """Run the lifecycle; the terminal phase reported, or None when stopped before etcd answered."""
        dirs = self.settings.dirs
        for folder in (dirs.control, dirs.logs, dirs.data, dirs.model, dirs.results, dirs.checkpoints):
            folder.mkdir(parents=True, exist_ok=True)
        make_shared_folder(dirs.shared)
        server = self.metrics.serve(self.settings.metrics_port) if self.settings.metrics_port else None
        etcd = await self._connect()
        if etcd is None:
            return None
        self._etcd = etcd
        if not await self._open_record():
            await etcd.close()
            return None
        reporter = StatusReporter(
            self._deliver(etcd),
            learner_id=self.settings.learner_id,
            state_dir=dirs.control,
            first_sequence=self.settings.status_sequence_start,
        )
        await reporter.start()
        watcher = asyncio.create_task(self._watch_halt(etcd))
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            settings = self.settings
            async with etcd.hold_alive(
                settings.job_id, settings.learner_id, settings.etcd.lease_ttl_s, settings.etcd.root, self.fence
            ):
                phase = await self._lifecycle(reporter, etcd)
                await self._flush(reporter, self._remaining(default=60.0))
                if not self.settings.exit_when_done:
                    await self.terminate.wait()
                return phase
        finally:
            watcher.cancel()
            heartbeat.cancel()
            await asyncio.gather(watcher, heartbeat, return_exceptions=True)
            await self._stop_last_metrics()
            delivered = await reporter.flush(self._remaining(default=10.0))
            if not delivered:
                LOGGER.error("status updates still queued at exit; they stay in %s for the next start", dirs.control)
            await reporter.aclose()
            await etcd.close()
            if server is not None:
                server.close()
            if self.history is not None:
                self.history.close()

    async def _lifecycle(self, reporter: StatusReporter, etcd: EtcdStore) -> Phase:
        settings, control = self.settings, self.settings.dirs.control
        done = self.progress.current.terminal
        if done is not None:
            LOGGER.info("this learner already ended %s; nothing left to do", done)
            return Phase(done)

        if not self.progress.current.inputs_ready:
            if reporter.last is None:
                self._report(reporter, Phase.PENDING)
            self._report(reporter, Phase.DOWNLOADING)
            outcome = await self._download()
            if outcome is not None:
                signal_halt(control)  # learner-run then ends without running the command
                await self._put_record(self._inputs_record())
                return self._finish(reporter, outcome)
        if not self.progress.current.started and settings.held_attempt is not None:
            outcome = await self._await_release(etcd, settings.held_attempt)
            if outcome is not None:
                signal_halt(control)
                await self._put_record(self._inputs_record())
                return self._finish(reporter, outcome)
        shipper = make_log_shipper(settings, self._log_sink, self.parser, self.metrics)
        try:
            shipper.hold()  # before start: the log is open here before the learner can write or swap it
        except UnsafeFileError as error:
            self._refuse(error)
        if not self.progress.current.started:
            signal_start(control)
            self.progress.update(started=True)
        restored = self.progress.current.restored_step
        self._report(reporter, Phase.PROCESSING, f"resumed from step {restored}" if restored is not None else "")

        stop_processing = asyncio.Event()
        store = await self._s3()
        if self.events is not None:
            self.history = MetricsHistory(settings.dirs.control, "tensorboard")
        self._last_metrics = asyncio.create_task(
            follow_metrics(
                settings,
                self.parser,
                self.metrics,
                self._publisher(etcd),
                stop_processing,
                events=self.events,
                history=self.history,
                drained=self._metrics_drained,
            )
        )
        self._last_metrics.add_done_callback(self._follower_done)
        followers = [
            asyncio.create_task(shipper.run(stop_processing)),
            asyncio.create_task(periodic_checkpoints(settings, store, self.metrics, stop_processing)),
            asyncio.create_task(sample_resources(settings, self.metrics, stop_processing)),
            asyncio.create_task(ship_metrics(settings, self.history, self._upload_metrics, stop_processing)),
            asyncio.create_task(follow_boundaries(settings, etcd, self.fence, stop_processing)),
        ]
        for follower in followers:
            follower.add_done_callback(self._follower_done)
        exit_record, halt_requested = await self._await_exit()
        self._report(reporter, Phase.STORING)
        storing_starts = self.progress.update(storing_starts=self.progress.current.storing_starts + 1).storing_starts
        stop_processing.set()
        for result in await asyncio.gather(*followers, return_exceptions=True):
            if isinstance(result, BaseException):
                LOGGER.error("follower failed: %r", result)
        oom_kills = self.cgroup.oom_kills() if self.cgroup is not None else None
        forks_refused = self.cgroup.forks_refused() if self.cgroup is not None else None
        outcome = outcome_of(
            exit_record,
            halt_requested=halt_requested,
            oom_kills=oom_kills,
            forks_refused=forks_refused,
            job_full=full_note(settings.dirs.root),
        )
        if exit_record.reason == "lost":
            outcome = Outcome(Phase.FAILED, ErrorCode.LEARNER_LOST, exit_record.error or "learner lost", None)
        if self.fence.fenced:  # another attempt may run: nothing of this one is stored (nor its status accepted)
            return self._finish(reporter, self._fenced_outcome())
        try:
            results = await self._store_outputs()
        except UnsafeFileError as e:
            self._refuse(e)
        except LeaseLapsedError:
            raise  # not the job's failure: no final status, the sidecar exits LEASE_LAPSED_EXIT (cli)
        except SidecarError as e:
            if self.fence.fenced:  # fenced while storing: the job is another attempt's, not failed by this one
                return self._finish(reporter, self._fenced_outcome())
            LOGGER.warning("storing failed: %s", e)
            if outcome.phase is Phase.COMPLETED:
                outcome = Outcome(Phase.FAILED, ErrorCode.UPLOAD_FAILED, f"results not stored: {e}", outcome.exit_code)
        else:
            outcome = results.applied_to(stored_again(outcome, results, storing_starts))
        await self._abort_open_uploads()
        if self._refused is not None:
            outcome = Outcome(Phase.FAILED, ErrorCode.UNSAFE_FILE, str(self._refused), outcome.exit_code)
        if self._terminated_at is not None and outcome.phase is Phase.HALTED:
            outcome = Outcome(outcome.phase, outcome.error_code, f"terminated: {outcome.message}", outcome.exit_code)
        return self._finish(reporter, outcome)

    def _fenced_outcome(self) -> Outcome:
        return Outcome(Phase.HALTED, ErrorCode.NONE, f"fenced: {self.fence.reason}", None)

    async def _flush(self, reporter: StatusReporter, timeout_s: float) -> None:
        """Wait, at most ``timeout_s``, until the last metrics and every queued status are in etcd."""
        waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(reporter.flush(timeout_s))}
        if self._last_metrics is not None:
            waits.add(self._last_metrics)
        await asyncio.wait(waits, timeout=timeout_s)

    async def _stop_last_metrics(self) -> None:
        task = self._last_metrics
        if task is None:
            return
        if not task.done():
            LOGGER.error("the last metrics were not in etcd before the sidecar stopped")
            task.cancel()
        for result in await asyncio.gather(task, return_exceptions=True):
            if isinstance(result, Exception):
                LOGGER.error("following the metrics failed: %r", result)

    def _report(self, reporter: StatusReporter, phase: Phase, message: str = "") -> None:
        """Report ``phase`` unless a restarted sidecar already did (phases are reported once)."""
        if reporter.last is None or reporter.last.phase != phase:
            reporter.report(phase, message=message)
            self.metrics.status_queued.inc()
        self.metrics.set_phase(phase)

    def _finish(self, reporter: StatusReporter, outcome: Outcome) -> Phase:
        reporter.report(
            outcome.phase, error_code=outcome.error_code, message=outcome.message, exit_code=outcome.exit_code
        )
        self.metrics.status_queued.inc()
        self.metrics.set_phase(outcome.phase)
        self.progress.update(terminal=outcome.phase.value)
        LOGGER.info("learner %d: %s %s", self.settings.learner_id, outcome.phase.value, outcome.message)
        return outcome.phase

    async def _download(self) -> Outcome | None:
        """Fetch the inputs; an Outcome when the learner must not start (halted, refused or failed)."""
        fetch = asyncio.create_task(self._fetch_inputs())
        interrupt = asyncio.create_task(self._interrupted())
        await asyncio.wait({fetch, interrupt}, return_when=asyncio.FIRST_COMPLETED)
        interrupt.cancel()
        if not fetch.done():
            fetch.cancel()
            await asyncio.gather(fetch, return_exceptions=True)
            return Outcome(Phase.HALTED, ErrorCode.NONE, "halted before the learner started", None)
        try:
            ready = fetch.result()
        except UnsafePathError as e:
            return Outcome(Phase.FAILED, ErrorCode.BAD_INPUT, str(e), None)
        except SidecarError as e:
            return Outcome(Phase.FAILED, ErrorCode.DOWNLOAD_FAILED, str(e), None)
        except OSError as e:  # the transfers name their object; this is the net under everything else
            return Outcome(Phase.FAILED, ErrorCode.DOWNLOAD_FAILED, f"placing the inputs failed: {e}", None)
        self._keep_inputs_record(ready)
        self.progress.update(inputs_ready=True, restored_step=ready.restored_step)
        return None

    async def _await_release(self, etcd: EtcdStore, attempt: int) -> Outcome | None:
        """A held pair: wait, inputs in, until the scheduler releases this attempt (its victims' room is free); an
        Outcome when halted or stopped first, or when etcd cannot say."""
        key = keys.release_key(self.settings.job_id, self.settings.etcd.root)
        LOGGER.info("inputs ready; held until %s reads %d", key, attempt)
        release = asyncio.create_task(etcd.wait_for_key(key, str(attempt).encode()))
        interrupt = asyncio.create_task(self._interrupted())
        await asyncio.wait({release, interrupt}, return_when=asyncio.FIRST_COMPLETED)
        interrupt.cancel()
        if not release.done():
            release.cancel()
            await asyncio.gather(release, return_exceptions=True)
            return Outcome(Phase.HALTED, ErrorCode.NONE, "halted before the learner started (held)", None)
        try:
            release.result()
        except SidecarError as e:
            return Outcome(Phase.FAILED, ErrorCode.CONFIG, f"waiting for the release of a held start: {e}", None)
        LOGGER.info("released: starting the learner")
        return None

    def _keep_inputs_record(self, ready: InputsReady) -> None:
        """The inputs' digests, kept in the control folder until the outputs join them (a restarted sidecar does
        not download again)."""
        record = SidecarRecord(
            self.settings.learner_id,
            ready.data,
            ready.model,
            ready.packages,
            restored_step=ready.restored_step,
            restored_checkpoint=ready.restored_checkpoint,
        )
        write_atomic(self.settings.dirs.control / INPUTS_RECORD, record.to_json())

    async def _store_record(self, results: StoredTree, metrics: HashedObject | None) -> None:
        """``provenance/sidecar.json`` beside the outputs: the inputs' digests and those of what was uploaded."""
        settings = self.settings
        prefix = settings.locations.results.prefix
        record = replace(
            await asyncio.to_thread(self._inputs_record),
            results=tuple(Digested(o.key.removeprefix(prefix), o.sha256, o.size) for o in results.stored),
            metrics=Digested(metrics.key.removeprefix(prefix), metrics.sha256, metrics.size) if metrics else None,
        )
        await self._put_record(record)
        store, location = await self._s3(), settings.locations.results
        bucket, key = location.bucket, location.key(RECORD_KEY)
        await retry_async(
            functools.partial(asyncio.to_thread, store.put_bytes, bucket, key, record.to_json()),
            transfer_backoff(settings),
            what=f"put s3://{bucket}/{key}",
        )

    def _inputs_record(self) -> SidecarRecord:
        """The inputs' digests kept since DOWNLOADING (none where the download did not finish)."""
        path = self.settings.dirs.control / INPUTS_RECORD
        try:
            return SidecarRecord.from_json(path.read_bytes(), str(path))
        except FileNotFoundError:
            return SidecarRecord(self.settings.learner_id)
        except (OSError, RecordError) as e:
            LOGGER.warning("the inputs' digests are lost (%s): the record names only the outputs", e)
            return SidecarRecord(self.settings.learner_id)

    async def _open_record(self) -> bool:
        """Say in etcd that this learner's record is due, before anything is downloaded or uploaded (retried while
        etcd is out); False when the sidecar is stopped first."""
        settings, attempt, etcd = self.settings, attempt_of(self.settings.locations.results.prefix), self._etcd
        if etcd is None or attempt is None:
            return True
        backoff = Backoff(initial_s=0.2, maximum_s=5.0, max_attempts=None)
        opening = asyncio.create_task(
            retry_async(
                lambda: open_record(etcd, settings.job_id, attempt, settings.learner_id, settings.etcd.root),
                backoff,
                what="open the provenance record",
            )
        )
        stop = asyncio.create_task(self.terminate.wait())
        await asyncio.wait({opening, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not opening.done():
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
            return False
        opening.result()
        return True

    async def _put_record(self, record: SidecarRecord) -> None:
        """The record into the job's etcd records, the only copy the scheduler signs (docs/provenance.md), before
        the final status is queued: the scheduler, seeing the learner end, finds it there. Retried while etcd is
        out, until the shutdown deadline; a record never written leaves the job's provenance marked incomplete,
        naming this learner."""
        settings, attempt = self.settings, attempt_of(self.settings.locations.results.prefix)
        if self._etcd is None or attempt is None or self.fence.fenced:
            return
        etcd = self._etcd
        backoff = Backoff(initial_s=0.2, maximum_s=5.0, max_attempts=None, deadline_s=self._remaining(default=60.0))
        try:
            await retry_async(
                lambda: put_record(etcd, settings.job_id, attempt, record, settings.etcd.root),
                backoff,
                what="put the provenance record",
            )
        except SidecarError:
            LOGGER.exception("the provenance record of attempt %d is not in etcd", attempt)

    async def _fetch_inputs(self) -> InputsReady:
        return await fetch_inputs(self.settings, await self._s3(), self.metrics)

    async def _interrupted(self) -> None:
        waits = [asyncio.create_task(self.halted.wait()), asyncio.create_task(self.terminate.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if self.terminate.is_set():
            self._terminated_at = self._terminated_at or time.monotonic()

    async def _await_exit(self) -> tuple[LearnerExit, bool]:
        """Wait for ``learner.exit``, passing on a halt or our own termination; detect a vanished learner.

        Where the sidecar sees the learner's cgroup or its processes, the record counts only once the learner's
        processes are gone: the command itself can write ``learner.exit``, and learner-run replaces it when the
        command ends.
        """
        control = self.settings.dirs.control
        halt_sent = self.progress.current.halt_requested
        deadline = time.monotonic() + self._halt_wait() if halt_sent else None
        empty_since: float | None = None
        early_record_seen = False
        LOGGER.info("watching the learner: %s", self._watching())
        while True:
            ended = not self._learner_running()  # before the read: the record is final then
            try:
                record = read_exit(control)
            except UnsafeFileError as error:
                self._refuse(error)
                record = None
            if record is not None and ended:
                return record, halt_sent
            if record is not None and not early_record_seen:
                early_record_seen = True
                LOGGER.warning("%s appeared while the learner still runs: waiting for its processes to end", EXIT_FILE)
            if not halt_sent and (self.halted.is_set() or self.terminate.is_set() or self._refused is not None):
                if self.terminate.is_set():
                    self._terminated_at = self._terminated_at or time.monotonic()
                signal_halt(control)
                halt_sent = True
                self.progress.update(halt_requested=True)
                deadline = time.monotonic() + self._halt_wait()
            now = time.monotonic()
            if deadline is not None and now > deadline:
                return LearnerExit(137, "halt_timeout", error="no learner.exit within the halt grace period"), True
            if self.cgroup is not None and ended:
                if empty_since is None:
                    LOGGER.info("the learner's processes are gone; waiting for %s", EXIT_FILE)
                empty_since = empty_since or now
                if now - empty_since > LEARNER_LOST_AFTER_S:
                    lost = "the learner ended without learner-run's exit record: is learner-run the image's entrypoint?"
                    return LearnerExit(1, "lost", error=lost), halt_sent
            else:
                empty_since = None
            await self._pause(self.settings.timing.poll_interval_s)

    def _watching(self) -> str:
        """How the sidecar sees the learner's processes, for its log: where a job stays PROCESSING, this says why."""
        if self.cgroup is not None:
            return self.cgroup.describe()
        if self.settings.shares_learner_pid_namespace:
            return "its processes, in the PID namespace the two containers share"
        return f"only {EXIT_FILE}: the sidecar sees neither the learner's cgroup nor its processes"

    def _learner_running(self) -> bool:
        """Whether the learner's processes are seen alive; False where the sidecar cannot see them."""
        if self.cgroup is not None:
            return self.cgroup.populated()
        return self.settings.shares_learner_pid_namespace and learner_alive(os.getpid())

    def _follower_done(self, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        if isinstance(error, UnsafeFileError):
            self._refuse(error)

    def _refuse(self, error: UnsafeFileError) -> None:
        """The learner put a link or special file where the sidecar reads its log, metrics or exit record:
        the learner is halted and the job ends FAILED with this message."""
        if self._refused is None:
            LOGGER.error("%s: halting the learner", error)
            self._refused = error

    def _halt_wait(self) -> float:
        wait = self.settings.timing.halt_grace_s + EXIT_WAIT_MARGIN_S
        if self._terminated_at is not None:
            # Leave half of what is left of the shutdown deadline for storing and reporting.
            wait = min(wait, self._remaining(default=wait) / 2)
        return wait

    async def _pause(self, seconds: float) -> None:
        waits = [asyncio.create_task(self.halted.wait()), asyncio.create_task(self.terminate.wait())]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def _remaining(self, *, default: float) -> float:
        """Seconds left before the shutdown deadline once terminated, else ``default``."""
        if self._terminated_at is None and not self.terminate.is_set():
            return default
        started = self._terminated_at or time.monotonic()
        self._terminated_at = started
        return max(0.0, self.settings.timing.shutdown_deadline_s - (time.monotonic() - started))

    async def _store_outputs(self) -> StoredTree:
        """Checkpoints, results and the metric history; what became of the results."""
        settings, locations, store = self.settings, self.settings.locations, await self._s3()
        await store_checkpoints(settings, store, self.metrics)
        results = await store_tree(
            settings, store, self.metrics, settings.dirs.results, locations.result_files, "results"
        )
        if self._last_metrics is not None and self.history is not None:
            # The history's last scalars are read right after PROCESSING; a follower that failed reads no more.
            drained = asyncio.create_task(self._metrics_drained.wait())
            await asyncio.wait({drained, self._last_metrics}, return_when=asyncio.FIRST_COMPLETED)
            drained.cancel()
        handle = await asyncio.to_thread(stored_metrics, settings.dirs, self.history)
        metrics = None
        if handle is not None:
            with handle:
                metrics = await retry_async(
                    functools.partial(self._upload_metrics, handle),
                    transfer_backoff(settings),
                    what=f"upload {METRICS_FILE}",
                )
        await self._store_record(results, metrics)
        return results

    async def _abort_open_uploads(self) -> None:
        """Abort the multipart uploads left open under this learner's outputs (a sidecar killed while uploading,
        an upload whose abort failed): nothing of this learner uploads any more, and their parts take space
        until aborted. A failure is logged; it costs no result. Outputs at a bucket's root are left alone: the
        bucket's other uploads are not this learner's."""
        results = self.settings.locations.results
        if not results.prefix.endswith("/"):
            return
        try:
            store = await self._s3()
            aborted = await asyncio.to_thread(store.abort_open_uploads, results.bucket, results.prefix)
        except SidecarError as e:
            LOGGER.warning("open multipart uploads under %s not aborted: %s", results, e)
            return
        for upload in aborted:
            LOGGER.info("aborted the open multipart upload of s3://%s/%s", results.bucket, upload.key)

    async def _upload_metrics(self, handle: IO[bytes]) -> HashedObject:
        """``logs/metrics.jsonl``: the learner's lines and the history (:func:`stored_metrics`)."""
        settings, store = self.settings, await self._s3()
        bucket, key = settings.locations.log_files.bucket, settings.locations.log_files.key(METRICS_FILE)
        source = str(settings.dirs.logs / METRICS_FILE)
        return await asyncio.to_thread(store.upload_stream, handle, bucket, key, source=source)

    async def _log_sink(self, name: str, data: bytes) -> None:
        location = self.settings.locations.log_files
        await asyncio.to_thread((await self._s3()).put_bytes, location.bucket, location.key(name), data)
        self.metrics.log_bytes_shipped.inc(len(data))
        self.metrics.log_parts_shipped.inc()

    async def _s3(self) -> S3Store:
        """The S3 client, made on first use on a worker thread (the event loop keeps delivering statuses)."""
        if self._store is None:
            self._store = asyncio.create_task(asyncio.to_thread(_open_store, self.settings.s3, self.fence))
        return await asyncio.shield(self._store)

    def _publisher(self, etcd: EtcdStore) -> PublishMetrics:
        async def publish(values: Mapping[str, float]) -> None:
            settings = self.settings
            await etcd.put_metrics(settings.job_id, settings.learner_id, values, settings.etcd.root, self.fence)

        return publish

    def _deliver(self, etcd: EtcdStore) -> Deliver:
        async def deliver(record: StatusRecord) -> None:
            await etcd.put_status(self.settings.job_id, record, self.settings.etcd.root, self.fence)
            self.metrics.status_delivered.inc()

        return deliver

    async def _heartbeat(self) -> None:
        """Touch ``control/sidecar.heartbeat`` for the image's healthcheck."""
        path = self.settings.dirs.control / HEARTBEAT_FILE
        while True:
            path.touch()
            await asyncio.sleep(HEARTBEAT_S)

    async def _watch_halt(self, etcd: EtcdStore) -> None:
        key = keys.halt_key(self.settings.job_id, self.settings.etcd.root)
        try:
            await etcd.wait_for_key(key)
        except SidecarError as e:
            LOGGER.warning("watching %s failed: %s", key, e)
            return
        LOGGER.info("halt requested (%s)", key)
        self.halted.set()

    def _fenced(self) -> None:
        """The job moved on to another attempt: halt the learner as a halt key would."""
        self.halted.set()

    async def _connect(self) -> EtcdStore | None:
        backoff = Backoff(initial_s=0.2, maximum_s=5.0, max_attempts=None)
        connect = asyncio.create_task(
            retry_async(lambda: EtcdStore.connect(self.settings.etcd), backoff, what="connect to etcd")
        )
        stop = asyncio.create_task(self.terminate.wait())
        await asyncio.wait({connect, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not connect.done():
            connect.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connect
            return None
        return connect.result()


def _open_store(settings: S3Settings, fence: Fence) -> S3Store:
    """Import boto3 and make the client: the sidecar's largest start cost, deferred until S3 is needed. Its
    writes go only while ``fence`` allows them."""
    from controller_sidecar.s3store import S3Store  # here, not at the top: deferred on purpose

    store = S3Store(settings)
    store.write_gate = fence.check
    return store


def make_shared_folder(folder: Path) -> None:
    """``folder``, writable by the learner's group (0) and handing that group to what is made in it, unless it
    is there already (the mount point of a multi-learner job's own volume, which is not this process's)."""
    try:
        folder.mkdir()
    except FileExistsError:
        return
    folder.chmod(0o2775)
