"""The sweep driver: runs each sweep's trials as ordinary jobs, as the decision core (`RungBook`) says.

A trial's job gets its parameters and its rung's budget as learner variables (`trial_env`); the learner
stops at the budget by itself and ends COMPLETED with its checkpoint stored (or the user halts it). The
driver then reads the objective at the budget from the job's stored metric history, reports it to the
book, and stores the book's decisions with the trial records before acting on them: it creates a started
trial's job (the job id is the trial's, so a second create after a restart is refused by etcd, never run
twice), and resumes a promoted trial's job from its own last attempt's checkpoint with the next budget.
A trial that can no longer be promoted has its checkpoints removed (unless the search file keeps them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from controller_sidecar.errors import TransientError
from controller_sidecar.settings import S3Location
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.planning import endpoints_for
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import Transitions
from learnerkit.scheduler.errors import JobStateError, StoreUnavailableError, UnknownSweepError
from learnerkit.scheduler.evaluations.plan import EvaluatedJob
from learnerkit.scheduler.jobs.layout import job_location
from learnerkit.scheduler.jobs.s3clients import S3Clients
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import credentials_key
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.outputs.reader import OutputsReader
from learnerkit.scheduler.sweeps.best import best_index
from learnerkit.scheduler.sweeps.books import SweepBook, plan_of, restore_book
from learnerkit.scheduler.sweeps.boundary import Boundary
from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialState
from learnerkit.scheduler.sweeps.searchfile import SearchFileError, parse_search_file
from learnerkit.scheduler.sweeps.space import Config
from learnerkit.scheduler.sweeps.spec import SweepSpec
from learnerkit.scheduler.sweeps.store import (
    StoredSweep,
    StoredTrial,
    SweepSpecRecord,
    SweepState,
    SweepStatus,
    SweepStore,
)
from learnerkit.scheduler.sweeps.suggest import new_config
from learnerkit.scheduler.sweeps.sweepcheck import sweep_problems
from learnerkit.scheduler.sweeps.trialids import SWEEP_ID_PREFIX, trial_job_id, trial_of

LOGGER = logging.getLogger(__name__)
PARENT_ATTEMPT = 0
"""A PBT trial's parent's checkpoints are copied to its `attempt-0/`, the attempt its first attempt resumes."""
BUDGET_ENV = "LEARNER_BUDGET"
UNIT_ENV = "LEARNER_BUDGET_UNIT"
BUDGET_CHECK_S = 5.0
"""How often a running trial's stored metric history is read for its budget (a learner that ignores it)."""
PARAMETERS_ENV = "LEARNER_PARAMETERS"
"""All of a trial's parameters as one JSON object (`learner.parameters()`), beside one variable each."""

ManifestParser = Callable[[str, str, str, str | None], Awaitable[JobManifest]]
"""(text, source, tenant, image) -> the checked manifest, as a job submit reads it."""
JobRecorder = Callable[[Tracked], Awaitable[None]]
"""Store a new job and queue it (the scheduler's own submit path); refuses a job id that exists."""


@dataclass
class ActiveSweep:
    record: SweepSpecRecord
    spec: SweepSpec
    manifest: JobManifest
    options: SubmitOptions
    book: SweepBook
    state: SweepState
    trials: dict[int, StoredTrial]
    pending: list[Decision] = field(default_factory=list)
    """Decisions the book took when it was rebuilt (`RungBook.review`), recorded by the next step."""

    @property
    def sweep_id(self) -> str:
        return self.record.sweep_id

    def job_id(self, index: int) -> str:
        return trial_job_id(self.sweep_id, index)

    def config(self, index: int) -> Config:
        """Trial `index`'s parameters, computed when it starts (a grid is never enumerated; TPE is told the
        results so far; a PBT trial takes its parent's)."""
        parameters = {i: t.parameters for i, t in self.trials.items()}
        return new_config(self.spec, self.book, index, parameters)


OVERLAP_BYTES = 256
"""How much of what was read last is read again and compared: the stored file is the learner's metrics.jsonl then
the sidecar's TensorBoard records, so it grows at its end only while the learner alone writes it."""


@dataclass
class HistoryCursor:
    """A trial job's metric history as read so far: per attempt, the bytes read, the last `OVERLAP_BYTES` of them,
    a last line not yet complete, and the (step, objective) records found."""

    metric: str
    read: dict[int, int] = field(default_factory=dict)
    tail: dict[int, bytes] = field(default_factory=dict)
    partial: dict[int, bytes] = field(default_factory=dict)
    found: dict[int, list[tuple[int, float]]] = field(default_factory=dict)

    def offset(self, attempt: int) -> int:
        """Where the next read of `attempt`'s file starts: the bytes read, less the overlap read again."""
        return self.read.get(attempt, 0) - len(self.tail.get(attempt, b""))

    def add(self, attempt: int, data: bytes, start: int) -> bool:
        """The bytes of `attempt`'s file from `start` on; False (nothing taken) when what was read before changed
        (the file was stored anew, not grown at its end): the caller reads it again from 0."""
        if start:
            tail = self.tail.get(attempt, b"")
            if start != self.offset(attempt) or not data.startswith(tail):
                return False
            data = data[len(tail) :]
        else:
            self.partial.pop(attempt, None)
            self.found[attempt] = []
        *lines, rest = (self.partial.get(attempt, b"") + data).split(b"\n")
        self.partial[attempt] = rest
        self.read[attempt] = (start + len(self.tail.get(attempt, b"")) if start else 0) + len(data)
        self.tail[attempt] = (self.tail.get(attempt, b"") + data)[-OVERLAP_BYTES:] if start else data[-OVERLAP_BYTES:]
        found = self.found.setdefault(attempt, [])
        for line in lines:
            record = _objective_record(line, self.metric)
            if record is not None:
                found.append(record)
        return True

    def values(self) -> list[tuple[int, float]]:
        """Every record found, attempts in order, then a last line of each not ended by a newline yet."""
        records: list[tuple[int, float]] = []
        for attempt in sorted(self.found):
            records += self.found[attempt]
            last = _objective_record(self.partial.get(attempt, b""), self.metric)
            if last is not None:
                records.append(last)
        return records


def _objective_record(line: bytes, metric: str) -> tuple[int, float] | None:
    try:
        raw = json.loads(line)
        step, value = int(raw["step"]), raw["values"][metric]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return step, float(value)
    return None


class SweepDriver:
    def __init__(
        self,
        shared: Shared,
        transitions: Transitions,
        clients: S3Clients,
        reader: OutputsReader,
        parse: ManifestParser,
        record_job: JobRecorder,
    ) -> None:
        self.shared = shared
        self.transitions = transitions
        self.clients = clients
        self.reader = reader
        self.parse = parse
        self.record_job = record_job
        self.sweeps: dict[str, ActiveSweep] = {}
        self._store: SweepStore | None = None
        self._halting: set[str] = set()
        """Trial jobs halted at their budget by the driver, until they end."""
        self._histories: dict[str, HistoryCursor] = {}
        """What has been read of each running trial's metric history; dropped when its rung ends."""
        self._checked: dict[str, float] = {}
        """When each running trial's history was last read for its budget (the loop's monotonic clock)."""
        self._lock = asyncio.Lock()
        """One change of a sweep's records at a time: the step's and the verbs' (decisions are numbered)."""
        self._answered: set[tuple[str, int, int]] = set()
        """Rung boundaries answered (job, attempt, step): a learner waiting for its next budget is asked once."""

    @property
    def store(self) -> SweepStore:
        if self._store is None:
            self._store = SweepStore(self.shared.store.etcd, self.shared.store.root)
        return self._store

    # -- the learner's variables -------------------------------------------------------------------------

    def trial_env(self, job_id: str) -> Mapping[str, str]:
        """A trial job's parameters and budget as learner variables; {} for other jobs."""
        of = trial_of(job_id)
        sweep = self.sweeps.get(of.sweep_id) if of is not None else None
        if of is None or sweep is None or of.trial not in sweep.trials:
            return {}
        trial = sweep.trials[of.trial]
        env = {name: _env_text(value) for name, value in trial.parameters.items()}
        env[BUDGET_ENV] = str(sweep.spec.rungs[trial.record.target])
        env[UNIT_ENV] = sweep.spec.budget.unit.value
        env[PARAMETERS_ENV] = json.dumps(dict(trial.parameters), sort_keys=True)
        return env

    # -- submit and restore ------------------------------------------------------------------------------

    async def submit(
        self,
        tenant: str,
        search_text: str,
        search_source: str,
        manifest_text: str,
        manifest_source: str,
        *,
        image: str | None,
        store_model: Callable[[JobManifest, str], Awaitable[SubmitOptions]],
    ) -> ActiveSweep:
        spec = parse_search_file(search_text, Path(search_source))
        manifest = await self.parse(manifest_text, manifest_source, tenant, image)
        problems = sweep_problems(spec, manifest, Path(search_source))
        if problems:
            raise SearchFileError(problems)
        sweep_id = f"{SWEEP_ID_PREFIX}{uuid.uuid4().hex[:8]}"
        options = await store_model(manifest, sweep_id)
        record = SweepSpecRecord(
            sweep_id,
            tenant,
            time.time(),
            search_text,
            search_source,
            manifest_text,
            manifest_source,
            options.to_raw(),
        )
        if not await self.store.create(record):
            raise JobStateError(f"sweep id {sweep_id} exists already")
        sweep = active_sweep(record, spec, manifest, options, SweepState(), {})
        self.sweeps[sweep_id] = sweep
        self.shared.wake.set()
        return sweep

    async def rebuild(self) -> None:
        """Every stored sweep, after the jobs were restored. A sweep that cannot be restored (records that do not
        read, a search file or manifest this scheduler refuses now) is failed with the reason; the others start."""
        self.sweeps.clear()
        loaded = await self.store.load_all()
        failed = dict(loaded.unreadable)
        for stored in loaded.sweeps:
            try:
                sweep = await self._restore(stored)
            except (StoreUnavailableError, TransientError):
                raise  # etcd does not answer: the start fails, and is tried again
            except Exception as e:  # noqa: BLE001 (one sweep's state never stops the start)
                if not stored.state.status.terminal:
                    failed[stored.spec.sweep_id] = f"not restored after a scheduler restart: {one_line(e)}"
                else:
                    LOGGER.warning("sweep %s cannot be restored: %s", stored.spec.sweep_id, one_line(e))
                continue
            self.sweeps[sweep.sweep_id] = sweep
        for sweep_id, reason in failed.items():
            LOGGER.warning("sweep %s failed: %s", sweep_id, reason)
            await self.store.fail(sweep_id, reason)

    async def _restore(self, stored: StoredSweep) -> ActiveSweep:
        record = stored.spec
        spec = parse_search_file(record.search_text, Path(record.search_source))
        options = SubmitOptions.from_raw(record.submission)
        # With the submit's --image: the trials started after a restart run the image the first ones ran.
        manifest = await self.parse(record.manifest_text, record.manifest_source, record.tenant, options.image)
        if record.credentials_deleted:
            manifest = manifest.without_credentials()
        sweep = active_sweep(record, spec, manifest, options, stored.state, stored.trials)
        await self._evaluate(sweep)  # done before its best trial's round was recorded
        await self._ended(sweep)  # ended before its credentials were deleted (a crash between the two writes)
        return sweep

    # -- the loop's step ---------------------------------------------------------------------------------

    async def step(self) -> None:
        """Each running sweep's step. One that raises is rolled back to its stored records: an outage of etcd or
        of the store is retried by the next step, any other error fails that sweep with its reason; the other
        sweeps and the loop go on."""
        for sweep in list(self.sweeps.values()):
            if sweep.state.status is SweepStatus.CANCELLED:
                # Its trials end here, not in `sweep cancel`, which returns at once; no admission pass runs
                # meanwhile, so the capacity one frees goes to no other of them. Also after a restart.
                await self.transitions.cancel_all(self.running_jobs(sweep))
            elif not sweep.state.status.terminal:
                async with self._lock:
                    try:
                        await self._step(sweep)
                    except (StoreUnavailableError, TransientError) as e:
                        self._roll_back(sweep)
                        LOGGER.warning("sweep %s: step failed (retrying next step): %s", sweep.sweep_id, one_line(e))
                    except Exception as e:  # noqa: BLE001 (one sweep's error never stops the loop)
                        self._roll_back(sweep)
                        await self._fail(sweep, f"its step failed: {one_line(e)}")

    def _roll_back(self, sweep: ActiveSweep) -> None:
        """The book as the stored records leave it: the step's decisions were not all written."""
        sweep.book = restore_book(plan_of(sweep.spec), [t.record for t in sweep.trials.values()])
        sweep.pending = sweep.book.review()

    async def _fail(self, sweep: ActiveSweep, reason: str) -> None:
        LOGGER.error("sweep %s failed: %s", sweep.sweep_id, reason)
        failed = replace(sweep.state, status=SweepStatus.FAILED, reason=reason)
        try:
            sweep.state = await self.store.record(sweep.sweep_id, failed, [], [])
            await self._ended(sweep)
        except LearnerkitError as e:  # failed here; a restarted scheduler restores it from its records
            LOGGER.warning("sweep %s: its failure was not stored: %s", sweep.sweep_id, one_line(e))
            sweep.state = failed

    async def _step(self, sweep: ActiveSweep) -> None:
        if sweep.state.status is not SweepStatus.RUNNING:
            return
        await self._finish_actions(sweep)
        if sweep.pending:  # before a boundary's decisions: the book took these first
            pending, sweep.pending = sweep.pending, []
            await self._record(sweep, pending)
        # Before the budget checks: a trial promoted in place trains towards its new budget, never halted at the old.
        await self._boundaries(sweep)
        await self._remove_after_end(sweep)
        decisions: list[Decision] = []
        for index, trial in sorted(sweep.trials.items()):
            if trial.record.state is not TrialState.RUNNING:
                continue
            tracked = self.shared.jobs.get(trial.job_id)
            if tracked is None or tracked.state.attempt < trial.rung_attempt:
                continue
            if tracked.state.stage is not Stage.DONE:
                if tracked.state.stage is Stage.RUNNING:
                    await self._halt_past_budget(sweep, trial, tracked)
                continue
            self._halting.discard(trial.job_id)
            status = tracked.state.status
            if status in (JobStatus.COMPLETED, JobStatus.HALTED):
                step, value, why = await self._rung_result(sweep, trial, tracked)
                budget = sweep.spec.rungs[trial.record.target]
                if step is None and trial.in_place_attempt == tracked.state.attempt:
                    await self._not_taken(sweep, trial, tracked)
                    continue
                if status is JobStatus.HALTED and (step is None or step < budget):
                    continue  # halted before its budget (`job halt`, `sweep halt`): its rung goes on when resumed
                decisions += sweep.book.report(index, value, why_missing=why)
            else:
                decisions += sweep.book.lost(index, f"its job ended {status.value}: {tracked.state.reason}")
            self._histories.pop(trial.job_id, None)  # its rung ended: a promotion reads its history afresh
        decisions += sweep.book.fill()
        if not decisions and not sweep.book.finished:
            return
        await self._record(sweep, decisions)
        await self._finish_actions(sweep)

    # -- promotion in place ------------------------------------------------------------------------------

    async def _boundaries(self, sweep: ActiveSweep) -> None:
        """Answer each trial whose learner waits at its rung's budget for the next one (`learner.next_budget`):
        promoted there and then, it trains on in the same process; otherwise it ends its rung as before."""
        for index, trial in sorted(sweep.trials.items()):
            tracked = self.shared.jobs.get(trial.job_id)
            if (
                sweep.state.status is not SweepStatus.RUNNING
                or trial.record.state is not TrialState.RUNNING
                or tracked is None
                or tracked.state.stage is not Stage.RUNNING
                or tracked.state.attempt < trial.rung_attempt
            ):
                continue
            raw = self.shared.store.boundaries.get(trial.job_id)  # read by this step's monitoring of the job
            boundary = Boundary.from_json(raw) if raw is not None else None
            if boundary is None or boundary.attempt != tracked.state.attempt:
                continue
            asked = (trial.job_id, boundary.attempt, boundary.step)
            if asked in self._answered:
                continue
            budget, reason = await self._in_place(sweep, index, trial, tracked, boundary)
            await self.shared.store.answer_boundary(trial.job_id, boundary.attempt, boundary.step, budget, reason)
            self._answered.add(asked)

    async def _in_place(
        self, sweep: ActiveSweep, index: int, trial: StoredTrial, tracked: Tracked, boundary: Boundary
    ) -> tuple[int | None, str]:
        """The budget the waiting learner trains on to, or None and why not. A promotion in place is recorded
        before it is answered, as any decision is before the driver acts on it."""
        rungs, target = sweep.spec.rungs, trial.record.target
        if trial.in_place_attempt == boundary.attempt and target and boundary.budget == rungs[target - 1]:
            return rungs[target], ""  # decided before a restart, not answered then
        if boundary.budget != rungs[target]:
            return None, f"the budget it reached, {boundary.budget}, is not its rung's ({rungs[target]})"
        if target + 1 >= len(rungs):
            return None, "it reached the last rung: there is no next budget"
        if tracked.manifest.resources.learners != 1:
            return None, "a trial of several learners is promoted by a new deploy"
        metric = sweep.spec.objective.metric
        value = boundary.result(metric, rungs[target - 1] if target else 0)
        if value is None:
            return None, f"the process that waits did not log {metric!r} in this rung"
        decisions = sweep.book.report(index, value) + sweep.book.fill()
        promoted = [d for d in decisions if d.trial == index and d.action in (Action.PROMOTE, Action.CONTINUE)]
        if not promoted:
            # Its rung result counts now, as ASHA's worker reports when it finishes: the trials reaching this rung
            # after it see it, and its slot is free. Its job checkpoints and ends; that end is not reported again.
            await self._record(sweep, decisions)
            self._rung_ended(trial.job_id)
            await self._finish_actions(sweep)
            return None, "not promoted at once: the trial checkpoints and pauses, and the sweep decides later"
        said = "; promoted in place: the same learner process trains on"
        decisions = [replace(d, reason=d.reason + said) if d in promoted else d for d in decisions]
        await self._record(sweep, decisions, in_place={index: boundary.attempt})
        await self._finish_actions(sweep)
        return promoted[0].budget, ""

    def _rung_ended(self, job_id: str) -> None:
        """Forget what was read of a trial's rung: a promotion reads its history afresh and checks its budget again."""
        self._histories.pop(job_id, None)
        self._halting.discard(job_id)
        self._checked.pop(job_id, None)

    def _job_runs(self, job_id: str) -> bool:
        tracked = self.shared.jobs.get(job_id)
        return tracked is not None and tracked.state.stage is not Stage.DONE

    async def _remove_after_end(self, sweep: ActiveSweep) -> None:
        """Remove the checkpoints of the trials stopped while their jobs ran, once those jobs have ended."""
        removed = [
            replace(t, remove_at_end=False, freed_bytes=await self._remove_checkpoints(sweep, t))
            for t in sweep.trials.values()
            if t.remove_at_end and not self._job_runs(t.job_id)
        ]
        if removed:
            sweep.state = await self.store.record(sweep.sweep_id, sweep.state, [], removed)
            sweep.trials.update({t.record.index: t for t in removed})

    async def _not_taken(self, sweep: ActiveSweep, trial: StoredTrial, tracked: Tracked) -> None:
        """A trial promoted in place whose learner ended without training past its boundary (it gave up waiting
        just before the answer came): promoted as before, by a new attempt from its checkpoint."""
        resumed = replace(trial, rung_attempt=tracked.state.attempt + 1, in_place_attempt=None)
        sweep.state = await self.store.record(sweep.sweep_id, sweep.state, [], [resumed])
        sweep.trials[trial.record.index] = resumed
        self._histories.pop(trial.job_id, None)
        LOGGER.info(
            "sweep %s: trial %d did not take its promotion in place; resumed", sweep.sweep_id, trial.record.index
        )

    async def _record(
        self, sweep: ActiveSweep, decisions: list[Decision], *, in_place: Mapping[int, int] | None = None
    ) -> None:
        in_place = in_place or {}
        changed: dict[int, StoredTrial] = {}
        records = {r.index: r for r in sweep.book.records()}
        for decision in decisions:
            index = decision.trial
            record = records[index]
            previous = changed.get(index) or sweep.trials.get(index)
            if previous is None:
                origin = sweep.book.origin(index)
                parameters = await asyncio.to_thread(sweep.config, index)  # TPE takes a while on a long history
                parent = origin.parent if origin is not None else None
                trial = StoredTrial(record, sweep.job_id(index), parameters, rung_attempt=1, parent=parent)
            else:
                trial = replace(previous, record=record)
                promoted = decision.action in (Action.PROMOTE, Action.CONTINUE)
                if promoted and index in in_place:
                    trial = replace(trial, in_place_attempt=in_place[index])
                elif promoted:
                    tracked = self.shared.jobs.get(trial.job_id)
                    attempt = tracked.state.attempt if tracked is not None else trial.rung_attempt
                    trial = replace(trial, rung_attempt=attempt + 1, in_place_attempt=None)
                if decision.action is Action.STOP and not sweep.spec.keep_checkpoints:
                    if self._job_runs(trial.job_id):
                        trial = replace(trial, remove_at_end=True)
                    else:
                        trial = replace(trial, freed_bytes=await self._remove_checkpoints(sweep, trial))
            changed[index] = trial
        state = sweep.state
        settled = not any(self._job_runs(t.job_id) for t in sweep.trials.values())  # a paused one's may checkpoint
        if sweep.book.finished and settled and state.status is SweepStatus.RUNNING:
            state = replace(state, status=SweepStatus.DONE, reason="every trial settled")
        sweep.state = await self.store.record(sweep.sweep_id, state, decisions, list(changed.values()))
        sweep.trials.update(changed)
        await self._evaluate(sweep)
        await self._ended(sweep)
        for decision in decisions:
            LOGGER.info("sweep %s: trial %d %s: %s", sweep.sweep_id, decision.trial, decision.action, decision.reason)

    async def _evaluate(self, sweep: ActiveSweep) -> None:
        """A sweep done with `evaluations:` in its manifest evaluates its best trial's model, once: the round is
        recorded on the trial's job before the sweep's credentials are deleted, so a scheduler stopped in between
        begins it at its next start (`_restore`). A cancelled or failed sweep evaluates nothing."""
        specs = sweep.manifest.evaluations
        if not specs or sweep.state.status is not SweepStatus.DONE or sweep.record.credentials_deleted:
            return
        goal = sweep.spec.objective.goal.value
        index = best_index(
            ((i, t.record.results) for i, t in sweep.trials.items() if t.record.state is not TrialState.FAILED), goal
        )
        tracked = self.shared.jobs.get(sweep.job_id(index)) if index is not None else None
        if tracked is None or tracked.state.job_id in self.shared.evaluations.rounds:
            return
        endpoints = endpoints_for(sweep.manifest, self.shared.options.platform)
        manifest_text, source = sweep.record.manifest_text, sweep.record.manifest_source
        job = EvaluatedJob(tracked.state.job_id, sweep.manifest, endpoints, manifest_text, source)
        try:
            await self.shared.evaluations.begin(job, tracked.state.attempt, specs)
        except JobStateError as e:  # a round of `job evaluate` in flight: the sweep stays done
            LOGGER.warning("sweep %s: its best trial %d is not evaluated: %s", sweep.sweep_id, index, one_line(e))
            return
        LOGGER.info("sweep %s: evaluating its best trial %d (%s)", sweep.sweep_id, index, tracked.state.job_id)

    async def _ended(self, sweep: ActiveSweep) -> None:
        """An ended sweep's record loses its credentials in etcd, as an ended job's; the sweep in memory keeps
        its parsed manifest for reads (its trials' histories and results) until the scheduler restarts."""
        if sweep.state.status.terminal and not sweep.record.credentials_deleted:
            sweep.record = await self.store.delete_credentials(sweep.record)

    async def _finish_actions(self, sweep: ActiveSweep) -> None:
        """Make the jobs what the stored records say: create a started trial's job, resume a promoted one."""
        if sweep.state.status is not SweepStatus.RUNNING:
            return
        for trial in sweep.trials.values():
            if trial.record.state is not TrialState.RUNNING:
                continue
            tracked = self.shared.jobs.get(trial.job_id)
            if tracked is None:
                await self._create_job(sweep, trial)
            elif tracked.state.attempt < trial.rung_attempt and tracked.state.stage is Stage.DONE:
                await self._restore_credentials(sweep, tracked)
                async with self.shared.lock:
                    rung = trial.record.target
                    reason = f"sweep {sweep.sweep_id}: promoted to rung {rung + 1} ({sweep.spec.rungs[rung]})"
                    await self.transitions.requeue(tracked, reason, restart=False)
                self.shared.wake.set()

    async def _restore_credentials(self, sweep: ActiveSweep, tracked: Tracked) -> None:
        """A paused trial's job ended COMPLETED, and its store credentials were deleted then: a promotion runs
        it again, so it gets them back from the sweep's own record (in etcd too, for a restart)."""
        record = {"manifest": sweep.record.manifest_text, "source": sweep.record.manifest_source}
        await self.shared.store.etcd.put(credentials_key(tracked.state.job_id), json.dumps(record))
        tracked.manifest, tracked.manifest_text = sweep.manifest, sweep.record.manifest_text
        tracked.source = sweep.record.manifest_source

    async def _create_job(self, sweep: ActiveSweep, trial: StoredTrial) -> None:
        manifest = sweep.manifest
        state = JobState(trial.job_id, sweep.record.tenant, manifest.name, time.time())
        if trial.parent is not None:
            await self._copy_parent_checkpoints(sweep, trial, trial.parent)
            state = replace(state, resume_from_attempt=PARENT_ATTEMPT)
        tracked = Tracked(state, manifest, sweep.record.manifest_text, sweep.record.manifest_source, sweep.options)
        try:
            await self.record_job(tracked)
        except JobStateError:  # created before a restart: etcd holds it, the restore tracks it
            LOGGER.info("sweep %s: job %s exists already", sweep.sweep_id, trial.job_id)
        self.shared.wake.set()

    async def _history(self, sweep: ActiveSweep, tracked: Tracked) -> list[tuple[int, float]]:
        """(step, objective) of every record of the job's stored metric history that has the objective, every
        attempt's in order; each attempt's file is read from where the last call stopped (`HistoryCursor`)."""
        job_id = tracked.state.job_id
        cursor = self._histories.setdefault(job_id, HistoryCursor(sweep.spec.objective.metric))
        # The sweep's manifest, not the job's: an ended job's store credentials are deleted (transitions.end).
        endpoints = endpoints_for(sweep.manifest, self.shared.options.platform)
        for attempt in range(1, tracked.state.attempt + 1):
            state, offset = tracked.state, cursor.offset(attempt)
            read = await self.reader.metrics_after(endpoints, sweep.manifest, state, attempt, offset)
            if read is not None and not cursor.add(attempt, *read):
                read = await self.reader.metrics_after(endpoints, sweep.manifest, state, attempt, 0)
                if read is not None:
                    cursor.add(attempt, *read)
        return cursor.values()

    async def _rung_result(
        self, sweep: ActiveSweep, trial: StoredTrial, tracked: Tracked
    ) -> tuple[int | None, float | None, str]:
        """The step and objective at the largest step of this rung (after the last rung's budget, up to this
        one's), from the job's stored history: a value of an earlier rung is never taken for this one's."""
        target = trial.record.target
        budget, after = sweep.spec.rungs[target], sweep.spec.rungs[target - 1] if target else 0
        history = await self._history(sweep, tracked)
        reached = [(step, value) for step, value in history if after < step <= budget]
        if not reached:
            unit, metric = sweep.spec.budget.unit.value, sweep.spec.objective.metric
            if after:
                return None, None, f"the objective {metric!r} was never reported after {unit} {after} up to {budget}"
            return None, None, f"the objective {metric!r} was never reported up to {unit} {budget}"
        step, value = max(reached, key=lambda found: found[0])
        return step, value, ""

    async def _halt_past_budget(self, sweep: ActiveSweep, trial: StoredTrial, tracked: Tracked) -> None:
        """Halt a trial whose learner ignores its budget once its stored history shows the budget reached (the
        sidecar stores it every 30 s: the learner may train past it meanwhile, never short of it)."""
        now = self.shared.clock.monotonic()
        if trial.job_id in self._halting or now < self._checked.get(trial.job_id, 0.0) + BUDGET_CHECK_S:
            return
        self._checked[trial.job_id] = now
        budget = sweep.spec.rungs[trial.record.target]
        steps = [step for step, _ in await self._history(sweep, tracked)]
        if not steps or max(steps) < budget:
            return
        async with self.shared.lock:
            if tracked.state.stage not in (Stage.DEPLOYED, Stage.RUNNING):
                return
            await self.shared.store.request_halt(trial.job_id)
            reason = f"sweep {sweep.sweep_id}: {sweep.spec.budget.unit.value} {max(steps)} reached rung budget {budget}"
            tracked.state = await self.shared.store.save(tracked.state.evolve(reason=reason))
        self._halting.add(trial.job_id)

    async def _copy_parent_checkpoints(self, sweep: ActiveSweep, trial: StoredTrial, parent: int) -> None:
        """A PBT trial starts from its parent's checkpoints: those of the parent job's last attempt are copied into
        the trial's own `attempt-0/`, which its first attempt restores (again after a restart: a copy overwrites)."""
        parent_job = self.shared.jobs.get(sweep.job_id(parent))
        if parent_job is None:
            raise JobStateError(f"trial {trial.record.index}'s parent trial {parent} has no job")
        endpoints = endpoints_for(sweep.manifest, self.shared.options.platform)
        store = self.clients.of(endpoints)
        bucket, source = job_location(sweep.manifest, parent_job.state.job_id)
        _, target = job_location(sweep.manifest, trial.job_id)
        last = f"{source}attempt-{parent_job.state.attempt}/"

        def copy() -> None:
            with tempfile.TemporaryDirectory(prefix="learnerkit-pbt-") as folder:
                for obj in store.list(S3Location(bucket, last)):
                    rest = obj.key[len(last) :]
                    if "/checkpoints/" not in f"/{rest}":
                        continue
                    local = Path(folder) / "object"
                    store.download(bucket, obj, local)
                    store.upload_file(local, bucket, f"{target}attempt-{PARENT_ATTEMPT}/{rest}")

        await asyncio.to_thread(copy)

    async def _remove_checkpoints(self, sweep: ActiveSweep, trial: StoredTrial) -> int:
        """Delete the trial's stored checkpoints (every attempt); the bytes freed."""
        endpoints = endpoints_for(sweep.manifest, self.shared.options.platform)
        store = self.clients.of(endpoints)
        bucket, prefix = job_location(sweep.manifest, trial.job_id)

        def remove() -> int:
            freed = 0
            for obj in store.list(S3Location(bucket, prefix)):
                if "/checkpoints/" in obj.key[len(prefix) :]:
                    store.delete(bucket, obj.key)
                    freed += obj.size
            return freed

        return await asyncio.to_thread(remove)

    # -- the verbs ---------------------------------------------------------------------------------------

    def owned(self, tenant: str, sweep_id: str) -> ActiveSweep:
        sweep = self.sweeps.get(sweep_id)
        if sweep is None or sweep.record.tenant != tenant:
            raise UnknownSweepError(f"no sweep {sweep_id!r}")
        return sweep

    def running_jobs(self, sweep: ActiveSweep) -> list[Tracked]:
        """The jobs of the trials training now (queued included)."""
        found = (self.shared.jobs.get(t.job_id) for t in sweep.trials.values() if t.record.state is TrialState.RUNNING)
        return [t for t in found if t is not None and t.state.stage is not Stage.DONE]

    async def set_status(self, sweep: ActiveSweep, status: SweepStatus, reason: str) -> None:
        async with self._lock:
            new_state = replace(sweep.state, status=status, reason=reason)
            sweep.state = await self.store.record(sweep.sweep_id, new_state, [], [])
            await self._ended(sweep)
        self.shared.wake.set()

    async def resume(self, sweep: ActiveSweep) -> None:
        """Running again: trials halted before their budget go on from their checkpoints."""
        async with self._lock:
            await self._resume(sweep)
        self.shared.wake.set()

    async def _resume(self, sweep: ActiveSweep) -> None:
        """Each trial halted by the sweep's halt gets its next attempt; one still halting (a resume right after the
        halt) too: `_finish_actions` requeues it once its job has ended."""
        resumed = []
        for trial in sweep.trials.values():
            tracked = self.shared.jobs.get(trial.job_id)
            if trial.record.state is not TrialState.RUNNING or tracked is None:
                continue
            state = tracked.state
            halted = state.status is JobStatus.HALTED or (state.halted_by_user and state.stage is not Stage.DONE)
            if halted and state.attempt >= trial.rung_attempt:
                resumed.append(replace(trial, rung_attempt=state.attempt + 1))
        new_state = replace(sweep.state, status=SweepStatus.RUNNING, reason="resumed")
        sweep.state = await self.store.record(sweep.sweep_id, new_state, [], resumed)
        sweep.trials.update({t.record.index: t for t in resumed})
        await self._finish_actions(sweep)

    async def decisions(self, sweep: ActiveSweep) -> list[Decision]:
        return await self.store.decisions(sweep.sweep_id)


def active_sweep(
    record: SweepSpecRecord,
    spec: SweepSpec,
    manifest: JobManifest,
    options: SubmitOptions,
    state: SweepState,
    trials: dict[int, StoredTrial],
) -> ActiveSweep:
    book = restore_book(plan_of(spec), [t.record for t in trials.values()])
    return ActiveSweep(record, spec, manifest, options, book, state, dict(trials), book.review())


ONE_LINE_CHARS = 300
"""An error in a sweep's reason or the log: its first line, cut to this many characters."""


def one_line(error: BaseException) -> str:
    """The error as one readable line (an etcd error can list every key of its write)."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return text if len(text) <= ONE_LINE_CHARS else f"{text[: ONE_LINE_CHARS - 3]}..."


def _env_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
