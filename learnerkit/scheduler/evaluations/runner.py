"""The evaluations of completed jobs, driven by the scheduler's control loop.

Each step looks at every evaluation in flight: one whose pair reported its end is settled (the report read
from the job's results, or ``crashed`` without one) and its pair removed; one with no pair deployed by this
process is deployed, after removing whatever of it is left, so a restarted scheduler redoes what it did not
see end, and never runs one evaluation twice at once (a pair's id is fixed by job, round and evaluation).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from controller_sidecar import keys
from controller_sidecar.status import Phase, StatusRecord
from learner.evaluation.report import report_from_dict
from learner.evaluation.spec import EvaluationSpec
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.backends.protocol import Backend
from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.evaluations.plan import (
    EvaluatedJob,
    SidecarPlatform,
    pair_id,
    plan_evaluation,
    report_key,
)
from learnerkit.scheduler.evaluations.record import EvaluationOutcome, EvaluationRound, evaluations_key
from learnerkit.scheduler.facade import EvaluationReport, EvaluationReports, EvaluationView
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.jobs.store import JobStore, StoredJob

LOGGER = logging.getLogger(__name__)
EvaluatorResolver = Callable[[str], str]
"""The evaluator image of a kind (``robustness``), through the image gate; raises when it may not run."""
RoundSigned = Callable[[], Awaitable[None]]
RoundEnded = Callable[[EvaluatedJob, EvaluationRound, RoundSigned], Awaitable[None]]
"""Called once a round's last evaluation is settled, and again by a restarted scheduler while the round's statement
is not stored: the core signs the round's provenance, then awaits the third argument (which records it signed and
drops the job's credentials)."""


SIGNING_WAIT_S = 30.0
"""How long `job evaluate` waits for the previous round's statement to be stored (a write of a few objects)."""


def _no_evaluators(kind: str) -> str:
    raise JobStateError(f"this scheduler has no {kind} evaluator image")


class EvaluationRunner:
    def __init__(
        self,
        store: JobStore,
        backend: Backend,
        clients: S3Clients,
        platform: SidecarPlatform,
        resolve_evaluator: EvaluatorResolver | None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.clients = clients
        self.platform = platform
        self.resolve_evaluator = resolve_evaluator or _no_evaluators
        self.instance = ""
        """The scheduler's instance id (set when it is claimed): it labels the pairs like the jobs'."""
        self.rounds: dict[str, EvaluationRound] = {}
        """Each job's latest round, as recorded."""
        self._jobs: dict[str, EvaluatedJob] = {}
        self._deployed: set[str] = set()
        """Pairs this process deployed; one in flight that is not here is deployed again."""
        self._redo: set[str] = set()
        """Pairs found unfinished after a restart: the orphan sweep removes them, and the final record their
        sidecar may write as it is stopped is not the evaluation's end, so they are run again."""
        self._lock = asyncio.Lock()
        self.round_ended: RoundEnded | None = None
        self._signing: dict[str, asyncio.Event] = {}
        """Per job whose latest round awaits its statement: set once it is stored."""
        self.signing_wait_s = SIGNING_WAIT_S

    async def keeps_credentials(self, stored: StoredJob, *, recorded_only: bool = False) -> bool:
        """Whether a COMPLETED job's credentials stay in etcd after a restart: its evaluations run, or the
        scheduler stopped between the job's end and recording its first round (not with ``recorded_only``: a
        sweep's trial, whose rounds its sweep begins)."""
        if stored.state.status is not JobStatus.COMPLETED:
            return False
        recorded = await self.store.etcd.get(evaluations_key(stored.state.job_id, self.store.root))
        if recorded is None:
            return not recorded_only and bool(stored.spec.get("manifest", {}).get("evaluations"))
        loaded = EvaluationRound.from_raw(stored.state.job_id, json.loads(recorded[0]))
        return loaded.in_flight or loaded.awaiting_signature

    async def load(self, job: EvaluatedJob, attempt: int, *, recorded_only: bool = False) -> None:
        """After a restart, before the orphan sweep: the job's recorded round, if any. An evaluation in flight
        whose pair had ended is settled at the next step; one still unfinished is run again. A job that ended
        before its first round was recorded gets it now (where its credentials are still there; not with
        ``recorded_only``: a sweep's trial, whose rounds its sweep begins)."""
        stored = await self.store.etcd.get(evaluations_key(job.job_id, self.store.root))
        if stored is None:
            if not recorded_only and job.manifest.evaluations and job.endpoints.s3_access_key:
                await self.begin(job, attempt, job.manifest.evaluations)
            return
        self._jobs[job.job_id] = job
        loaded = EvaluationRound.from_raw(job.job_id, json.loads(stored[0]))
        self.rounds[job.job_id] = loaded
        if loaded.awaiting_signature:  # stopped after the round settled, before its statement was stored
            await self._round_settled(job, loaded)
        for index, outcome in enumerate(loaded.outcomes):
            identity = pair_id(job.job_id, loaded.round, index)
            if outcome.outcome == "running":
                records, _, _ = await self.store.learner_records(identity)
                record = records.get(1)
                if record is None or not record.phase.terminal:
                    self._redo.add(identity)

    async def begin(self, job: EvaluatedJob, attempt: int, specs: tuple[EvaluationSpec, ...]) -> EvaluationRound:
        """Record a new round of evaluations of the job's model (recorded before anything is deployed), once the
        previous round's statement is stored."""
        signing = self._signing.get(job.job_id)
        if signing is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signing.wait(), self.signing_wait_s)
        async with self._lock:
            current = self.rounds.get(job.job_id)
            if current is not None and current.in_flight:
                raise JobStateError(f"job {job.job_id}: its evaluations of round {current.round} are still running")
            if current is not None and current.awaiting_signature:
                raise JobStateError(
                    f"job {job.job_id}: the provenance of its evaluation round {current.round} is not stored yet "
                    "(the scheduler's log says why); it is written again at the scheduler's next start"
                )
            if not job.endpoints.s3_access_key:
                raise JobStateError(
                    f"job {job.job_id}: the scheduler deleted its store's credentials when it ended and has "
                    "restarted since; submit it again to evaluate its model"
                )
            started = EvaluationRound.start(job.job_id, current.round + 1 if current else 1, attempt, specs)
            await self.store.put_credentials(job.job_id, job.manifest_text, job.source)
            await self._save(started)
            self._jobs[job.job_id] = job
        LOGGER.info("job %s: evaluation round %d: %d evaluations", job.job_id, started.round, len(specs))
        return started

    async def reports(self, job_id: str) -> EvaluationReports:
        """The latest round's outcomes with their reports, read from the job's results."""
        current = self.rounds.get(job_id)
        if current is None:
            return EvaluationReports(job_id, 0)
        endpoints = self._jobs[job_id].endpoints
        if not endpoints.s3_access_key:
            raise JobStateError(
                f"job {job_id}: the scheduler deleted its store's credentials when its evaluations ended and has "
                "restarted since; read the reports from the store with your keys (the outcomes are in job status)"
            )
        s3 = self.clients.of(endpoints)
        found: list[EvaluationReport] = []
        for outcome in current.outcomes:
            judges = current.judges(outcome.name)
            view = EvaluationView(outcome.name, outcome.kind, outcome.outcome, outcome.message, outcome.report, judges)
            if not outcome.report:
                found.append(EvaluationReport(view))
                continue
            bucket, _, key = outcome.report.removeprefix("s3://").partition("/")
            report = json.loads(await asyncio.to_thread(s3.get_bytes, bucket, key))
            summary = await asyncio.to_thread(s3.get_bytes, bucket, key.removesuffix(".json") + ".txt")
            found.append(EvaluationReport(view, summary.decode("utf-8", errors="replace"), report))
        return EvaluationReports(job_id, current.round, tuple(found))

    def in_flight(self, job_id: str) -> bool:
        current = self.rounds.get(job_id)
        return current is not None and current.in_flight

    def forget(self, job_id: str) -> None:
        """The job is deleted (its record with it): its settled evaluations leave memory too."""
        self.rounds.pop(job_id, None)
        self._jobs.pop(job_id, None)
        self._signing.pop(job_id, None)

    async def step(self) -> None:
        for job_id, current in list(self.rounds.items()):
            for index, outcome in enumerate(current.outcomes):
                if outcome.outcome == "running":
                    await self._advance(self._jobs[job_id], current.round, index)

    async def _advance(self, job: EvaluatedJob, round_: int, index: int) -> None:
        identity = pair_id(job.job_id, round_, index)
        if identity in self._redo:
            self._redo.discard(identity)
            await self._deploy(job, round_, index)
            return
        records, _, _ = await self.store.learner_records(identity)
        record = records.get(1)
        if record is not None and record.phase.terminal:
            await self._settle(job, round_, index, await self._outcome(job, round_, index, record))
            return
        if identity not in self._deployed:
            await self._deploy(job, round_, index)
            return
        sidecars = await asyncio.to_thread(self.backend.sidecars, identity)
        if 1 in sidecars.exited:
            records, _, _ = await self.store.learner_records(identity)  # its final record may have come meanwhile
            record = records.get(1)
            if record is None or not record.phase.terminal:
                why = f"its sidecar exited with {sidecars.exited[1]} before reporting an end"
                await self._settle(job, round_, index, self._crashed(job, round_, index, why))

    async def _deploy(self, job: EvaluatedJob, round_: int, index: int) -> None:
        identity = pair_id(job.job_id, round_, index)
        spec = self.rounds[job.job_id].specs[index]
        attempt = self.rounds[job.job_id].attempt
        await asyncio.to_thread(self.backend.teardown, identity)  # what an earlier process left of it
        await self.store.etcd.delete_prefix(keys.job_prefix(identity, self.store.root))
        try:
            image = await asyncio.to_thread(self.resolve_evaluator, spec.kind)
            plan = plan_evaluation(job, round_, attempt, index, spec, image, self.platform, self.instance)
            await self._deployed_image(job.job_id, round_, index, image)
            await asyncio.to_thread(self.backend.deploy, plan)
        except LearnerkitError as e:
            await asyncio.to_thread(self.backend.teardown, identity)
            await self._settle(job, round_, index, self._crashed(job, round_, index, f"not deployed: {e}"))
            return
        self._deployed.add(identity)
        LOGGER.info("job %s: evaluation %s deployed as %s", job.job_id, spec.name, identity)

    def _crashed(self, job: EvaluatedJob, round_: int, index: int, why: str) -> EvaluationOutcome:
        spec = self.rounds[job.job_id].specs[index]
        return EvaluationOutcome(spec.name, spec.kind, "crashed", why)

    async def _outcome(self, job: EvaluatedJob, round_: int, index: int, record: StatusRecord) -> EvaluationOutcome:
        spec = self.rounds[job.job_id].specs[index]
        if record.phase is not Phase.COMPLETED:
            code = f" (exit {record.exit_code})" if record.exit_code is not None else ""
            why = f"the evaluator ended {record.phase.value}{code}: {record.message}"
            return self._crashed(job, round_, index, why)
        bucket, key = report_key(job, round_, spec.name)
        s3 = self.clients.of(job.endpoints)
        try:
            report = report_from_dict(json.loads(await asyncio.to_thread(s3.get_bytes, bucket, key)))
        except (LearnerkitError, ValueError, KeyError, TypeError) as e:
            return self._crashed(job, round_, index, f"no readable report at s3://{bucket}/{key}: {e}")
        return EvaluationOutcome(
            spec.name,
            spec.kind,
            report.verdict,
            "; ".join(f"missed: {failure.describe()}" for failure in report.failures),
            tuple(report.to_dict()["failures"]),
            f"s3://{bucket}/{key}",
        )

    async def _settle(self, job: EvaluatedJob, round_: int, index: int, outcome: EvaluationOutcome) -> None:
        """Remove the pair, then record the outcome, then drop the pair's records: a scheduler stopped in between
        finds the evaluation running with its final record still there, and settles it again the same way."""
        identity = pair_id(job.job_id, round_, index)
        await asyncio.to_thread(self.backend.teardown, identity)
        async with self._lock:
            current = self.rounds[job.job_id]
            if current.round != round_:
                return
            settled = current.settled(index, replace(outcome, image=current.outcomes[index].image))
            await self._save(settled)
        await self.store.etcd.delete_prefix(keys.job_prefix(identity, self.store.root))
        self._deployed.discard(identity)
        LOGGER.info("job %s: evaluation %s %s %s", job.job_id, outcome.name, outcome.outcome, outcome.message)
        if not settled.in_flight:
            await self._round_settled(job, settled)

    async def _round_settled(self, job: EvaluatedJob, settled: EvaluationRound) -> None:
        """Have the round's statement signed; the credentials are kept until it is stored (recorded in etcd, so a
        scheduler stopped before that writes it at its next start)."""

        async def signed() -> None:
            await self._signed(job, settled.round)

        self._signing.setdefault(job.job_id, asyncio.Event())
        if self.round_ended is None:
            await signed()
        else:
            await self.round_ended(job, settled, signed)

    async def _signed(self, job: EvaluatedJob, round_: int) -> None:
        try:
            async with self._lock:
                current = self.rounds.get(job.job_id)
                if current is not None and current.round == round_ and not current.signed:
                    await self._save(replace(current, signed=True))
                    await self.store.delete_credentials(job.job_id, job.manifest_text, job.source)
        finally:
            if (signing := self._signing.pop(job.job_id, None)) is not None:
                signing.set()  # a `job evaluate` waiting for it goes on (and is refused if it is still unsigned)

    async def _deployed_image(self, job_id: str, round_: int, index: int, image: str) -> None:
        """Record the evaluator image before it is deployed: the round's provenance names it."""
        async with self._lock:
            current = self.rounds[job_id]
            if current.round == round_:
                await self._save(current.settled(index, replace(current.outcomes[index], image=image)))

    async def _save(self, evaluated: EvaluationRound) -> None:
        key = evaluations_key(evaluated.job_id, self.store.root)
        await self.store.etcd.put(key, json.dumps(evaluated.to_raw(), sort_keys=True))
        self.rounds[evaluated.job_id] = evaluated
