"""Jobs in etcd: what the scheduler writes (spec, status, history) and reads (the learners' statuses).

Layout (docs/architecture.md): ``/learnerkit/jobs/<id>/spec`` (the validated manifest without credentials, plus the
tenant), ``status`` (:class:`JobState`), ``history/job-<n>``, and the sidecars' ``learners/<n>/...``. The
manifest as submitted, credentials included, is kept apart under ``/learnerkit/credentials/<id>``: the
scheduler needs it to redeploy the job after a restart; nothing else reads it. Once the job can never run again
(COMPLETED, CANCELLED) the credentials in it are replaced (:meth:`JobStore.delete_credentials`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from controller_sidecar import keys
from controller_sidecar.errors import TransientError
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.status import StatusRecord
from learnerkit.pair.etcd import put_halt
from learnerkit.scheduler.errors import ManifestTooLargeError, SchedulerError, StoreUnavailableError
from learnerkit.scheduler.jobs.state import JobState, now_iso
from learnerkit.scheduler.manifest.redact import redact_credentials

LOGGER = logging.getLogger(__name__)
CREDENTIALS_ROOT = "/learnerkit/credentials"
MAX_CREATE_BYTES = 1024 * 1024
"""A new job's keys in one transaction: below etcd's default request limit (1.5 MiB) with room to spare."""


@dataclass(frozen=True)
class StoredJob:
    state: JobState
    spec: Mapping[str, Any]
    manifest_text: str
    source: str
    credentials_deleted: bool = False
    """The job ended for good: ``manifest_text`` holds no credentials any more."""


def credentials_key(job_id: str) -> str:
    return f"{CREDENTIALS_ROOT}/{job_id}"


def _history_entry(state: JobState) -> str:
    return json.dumps(
        {"status": state.status.value, "reason": state.reason, "timestamp": now_iso(), "attempt": state.attempt},
        sort_keys=True,
    )


@contextmanager
def _answering(what: str) -> Iterator[None]:
    """etcd not answering (an outage, a restart) as `StoreUnavailableError`: the API's 503, retried by the loop."""
    try:
        yield
    except TransientError as e:
        raise StoreUnavailableError(f"{what}: the job store (etcd) does not answer; try again shortly: {e}") from e


class JobStore:
    def __init__(self, etcd: EtcdStore | None = None, root: str = keys.ROOT) -> None:
        self._etcd = etcd
        self.root = root
        self.boundaries: dict[str, bytes] = {}
        """Job id -> learner 1's request for its next budget at a rung's end (promotion in place), as the last
        :meth:`learner_records` read found it: the sweep driver reads it here, with no request of its own."""

    @property
    def etcd(self) -> EtcdStore:
        if self._etcd is None:
            raise SchedulerError("the job store is not connected to etcd yet")
        return self._etcd

    def attach(self, etcd: EtcdStore) -> None:
        """Connect a store made before the event loop ran (the API server's lifespan connects it)."""
        self._etcd = etcd

    async def create(self, state: JobState, spec: Mapping[str, Any], manifest_text: str, source: str) -> bool:
        """Write a new job whole (spec, credentials, status, first history entry) or not at all."""
        first = state.evolve(history_sequence=1)
        items = {
            keys.spec_key(state.job_id, self.root): json.dumps(dict(spec), sort_keys=True),
            credentials_key(state.job_id): json.dumps({"manifest": manifest_text, "source": source}),
            keys.job_status_key(state.job_id, self.root): json.dumps(first.to_raw(), sort_keys=True),
            keys.history_key(state.job_id, "job-0000000001", self.root): _history_entry(first),
        }
        size = sum(len(key) + len(value.encode()) for key, value in items.items())
        if size > MAX_CREATE_BYTES:
            raise ManifestTooLargeError(f"job {state.job_id}: its records would take {size} bytes in etcd")
        with _answering(f"storing job {state.job_id}"):
            return await self.etcd.create_all(keys.spec_key(state.job_id, self.root), items)

    async def save(self, state: JobState, *, clear_learners: bool = False, clear_halt: bool = False) -> JobState:
        """Write the job's status; a change of status also gets a history entry (same transaction)."""
        with _answering(f"saving job {state.job_id}"):
            return await self._save(state, clear_learners=clear_learners, clear_halt=clear_halt)

    async def _save(self, state: JobState, *, clear_learners: bool, clear_halt: bool) -> JobState:
        stored = await self.etcd.get(keys.job_status_key(state.job_id, self.root))
        previous = JobState.from_raw(json.loads(stored[0])) if stored else None
        items: dict[str, str | bytes] = {}
        if previous is None or (previous.status, previous.reason, previous.attempt) != (
            state.status,
            state.reason,
            state.attempt,
        ):
            state = state.evolve(history_sequence=state.history_sequence + 1)
            entry = f"job-{state.history_sequence:010d}"
            items[keys.history_key(state.job_id, entry, self.root)] = _history_entry(state)
        items[keys.job_status_key(state.job_id, self.root)] = json.dumps(state.to_raw(), sort_keys=True)
        deletes: tuple[str, ...] = ()
        if clear_halt:
            deletes += (keys.halt_key(state.job_id, self.root),)
        await self.etcd.put_all(items, deletes)
        if clear_learners:
            await self.etcd.delete_prefix(f"{keys.job_prefix(state.job_id, self.root)}learners/")
            await self.etcd.delete_prefix(keys.next_budget_prefix(state.job_id, self.root))
            self.boundaries.pop(state.job_id, None)
        return state

    def instance_key(self) -> str:
        """Beside the jobs' prefix, not under it: ``/learnerkit/jobs.instance``."""
        return f"{self.root.rstrip('/')}.instance"

    async def claim_instance(self, proposed: str, *, fixed: bool) -> str:
        """The scheduler instance of this job root: the one stored, else ``proposed`` (stored now); a ``fixed``
        one (a setting) replaces what is stored."""
        key = self.instance_key()
        if fixed:
            await self.etcd.put(key, proposed)
            return proposed
        if await self.etcd.create_all(key, {key: proposed}):
            return proposed
        stored = await self.etcd.get(key)
        return stored[0].decode() if stored else proposed

    async def load_all(self) -> list[StoredJob]:
        """Every job with its spec and submitted manifest (for the rebuild after a restart), read in pages: only
        specs, statuses and credentials are kept, whatever else the jobs hold."""
        with _answering("reading the jobs"):
            statuses: dict[str, bytes] = {}
            specs: dict[str, bytes] = {}
            async for key, value in self.etcd.iter_prefix(f"{self.root.rstrip('/')}/"):
                job_id, _, leaf = key[len(self.root.rstrip("/")) + 1 :].partition("/")
                if leaf == "status":
                    statuses[job_id] = value
                elif leaf == "spec":
                    specs[job_id] = value
            secrets: dict[str, bytes] = {}
            async for key, value in self.etcd.iter_prefix(f"{CREDENTIALS_ROOT}/"):
                job_id = key[len(CREDENTIALS_ROOT) + 1 :]
                if job_id in statuses:
                    secrets[job_id] = value
        jobs: list[StoredJob] = []
        for job_id, value in statuses.items():
            if job_id not in specs or job_id not in secrets:
                continue
            try:
                submitted = json.loads(secrets[job_id])
                state = JobState.from_raw(json.loads(value))
                spec = json.loads(specs[job_id])
                deleted = submitted.get("credentials") == "deleted"
                jobs.append(StoredJob(state, spec, submitted["manifest"], submitted["source"], deleted))
            except (KeyError, ValueError, TypeError, AttributeError) as e:  # one job's records never stop a start
                LOGGER.warning(
                    "job %s: its records in etcd cannot be read (%s: %s); it is left out", job_id, type(e).__name__, e
                )
        return sorted(jobs, key=lambda job: job.state.submitted_at)

    async def states(self) -> list[JobState]:
        """Every job's status record (not its spec nor its credentials), read in pages."""
        root = self.root.rstrip("/")
        with _answering("reading the jobs' statuses"):
            return [
                JobState.from_raw(json.loads(value))
                async for key, value in self.etcd.iter_prefix(f"{root}/")
                if key[len(root) + 1 :].partition("/")[2] == "status"
            ]

    async def trim(self, job_id: str, *, provenance_records: bool = False) -> None:
        """Drop a finished job's history and its learners' records: its spec, final status and credentials stay
        (the results' location follows from them), so stored jobs cost little however long they ran. With
        `provenance_records`, its sidecars' provenance records go too (no statement will be made of them)."""
        prefix = keys.job_prefix(job_id, self.root)
        parts = ["history/", "learners/"]
        if provenance_records:
            parts.append(keys.provenance_prefix(job_id, self.root)[len(prefix) :] + "records/")
        with _answering(f"trimming job {job_id}"):
            for part in parts:
                await self.etcd.delete_prefix(f"{prefix}{part}")
            await self.etcd.delete(keys.halt_key(job_id, self.root))
            await self.etcd.delete(keys.release_key(job_id, self.root))

    async def learner_records(
        self, job_id: str
    ) -> tuple[dict[int, StatusRecord], set[int], dict[int, dict[str, float]]]:
        """The learners' latest status records, which learners hold their lease, and their metrics."""
        prefix = f"{keys.job_prefix(job_id, self.root)}learners/"
        found = await self.etcd.get_prefix(prefix)
        records: dict[int, StatusRecord] = {}
        alive: set[int] = set()
        metrics: dict[int, dict[str, float]] = {}
        for key, value in found.items():
            learner, _, leaf = key[len(prefix) :].partition("/")
            if not learner.isdigit():
                continue
            n = int(learner)
            if leaf == "status":
                records[n] = StatusRecord.from_json(value)
            elif leaf == "alive":
                alive.add(n)
            elif leaf == "metrics":
                metrics[n] = {k: float(v) for k, v in json.loads(value).items() if isinstance(v, int | float)}
            elif leaf == "boundary" and n == 1:
                self.boundaries[job_id] = value
        if keys.learner_boundary_key(job_id, 1, self.root) not in found:
            self.boundaries.pop(job_id, None)
        return records, alive, metrics

    def attempts_prefix(self, job_id: str) -> str:
        """``/learnerkit/jobs/<id>/attempts/``: the job's attempts history (:mod:`.attempts`)."""
        return f"{keys.job_prefix(job_id, self.root)}attempts/"

    async def put_attempt(self, job_id: str, number: int, record: str) -> None:
        with _answering(f"recording attempt {number} of job {job_id}"):
            await self.etcd.put(f"{self.attempts_prefix(job_id)}{number}", record)

    async def attempt_records(self, job_id: str) -> dict[int, bytes]:
        """The job's attempt records by number."""
        prefix = self.attempts_prefix(job_id)
        with _answering(f"reading the attempts of job {job_id}"):
            found = await self.etcd.get_prefix(prefix)
        return {int(key[len(prefix) :]): value for key, value in found.items() if key[len(prefix) :].isdigit()}

    async def fence(self, job_id: str, attempt: int) -> None:
        """From now on only ``attempt``'s sidecars may write the job's learner records: an older attempt's writes
        are refused by etcd (the sidecar's transactions compare this key), and its sidecars halt their learners
        as they read it (docs/security.md, "Fencing")."""
        with _answering(f"fencing job {job_id} to attempt {attempt}"):
            await self.etcd.put(keys.fence_key(job_id, self.root), str(attempt))

    async def release(self, job_id: str, attempt: int) -> None:
        """Let the held learners of this attempt start (their sidecars wait for it)."""
        with _answering(f"releasing job {job_id}"):
            await self.etcd.put(keys.release_key(job_id, self.root), str(attempt))

    async def request_halt(self, job_id: str) -> None:
        with _answering(f"halting job {job_id}"):
            await put_halt(self.etcd, job_id, self.root)

    async def answer_boundary(self, job_id: str, attempt: int, step: int, budget: int | None, reason: str) -> None:
        """The answer to a boundary, written once (a scheduler restarted after deciding writes the same)."""
        key = keys.next_budget_key(job_id, attempt, step, self.root)
        text = json.dumps({"budget": budget, **({"reason": reason} if reason else {})}, sort_keys=True)
        with _answering(f"answering job {job_id}'s rung boundary"):
            await self.etcd.create_all(key, {key: text})

    async def halt_requested(self, job_id: str) -> bool:
        """Whether the job's halt key is set: by the scheduler, or by hand (``sidecar halt``, ``dev down``)."""
        with _answering(f"reading job {job_id}'s halt"):
            return await self.etcd.get(keys.halt_key(job_id, self.root)) is not None

    async def put_credentials(self, job_id: str, manifest_text: str, source: str) -> None:
        """Keep the submitted manifest with its credentials again: a COMPLETED job's evaluations run with them."""
        with _answering(f"keeping the credentials of job {job_id}"):
            await self.etcd.put(credentials_key(job_id), json.dumps({"manifest": manifest_text, "source": source}))

    async def delete_credentials(self, job_id: str, manifest_text: str, source: str) -> None:
        """Keep the submitted manifest without its stores' credentials: the job can never run again."""
        record = {"manifest": redact_credentials(manifest_text), "source": source, "credentials": "deleted"}
        with _answering(f"deleting the credentials of job {job_id}"):
            await self.etcd.put(credentials_key(job_id), json.dumps(record))

    async def delete(self, job_id: str) -> None:
        """Remove the job's every key, its credentials included."""
        await self.etcd.delete_prefix(keys.job_prefix(job_id, self.root))
        await self.etcd.delete(credentials_key(job_id))
