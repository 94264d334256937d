"""Sweeps in etcd: everything a restarted scheduler needs to take the same decisions.

Layout, beside the jobs' root (``/learnerkit/sweeps`` for ``/learnerkit/jobs``):

- ``<sweep_id>/spec``: the tenant, the search file, the manifest as submitted with its stores' credentials
  redacted, the submit's options; written once, and again marked ``"credentials": "deleted"`` when the sweep ends.
- ``<sweep_id>/tenant``: the tenant alone, written with the spec: the event stream names a sweep's tenant without
  reading its spec (sweeps stored before it was written fall back to the spec).
- ``<sweep_id>/state``: running, halted, cancelled, done or failed (with the reason), and the count of decisions taken.
- ``<sweep_id>/trials/<index>``: each started trial's `TrialRecord`, its job and the attempt its rung began.
- ``<sweep_id>/decisions/<n>``: every decision in order, with its reason (read by `sweep status`).

The manifest as submitted, credentials included, lies apart under ``/learnerkit/credentials/sweeps/<sweep_id>``
(`sweep_credentials_key`), beside the jobs' ``/learnerkit/credentials/<job>`` and outside the range the event hub
watches: written in the transaction that writes the spec, read at start (`load_all`), deleted in the transaction
that marks the spec when the sweep ends (done, cancelled or failed; `SweepStore.delete_credentials`). A job id
holds no ``/``, so no job's key is ever ``sweeps/...``. A sweep stored before that layout (credentials in its
spec, no such key) runs on them, and `load_all` moves them out in one transaction.

A batch of decisions and the trial records they change are written before the driver acts on them (creates a
trial's job, resumes it): after a restart the records say what was decided, and the driver finishes what it
had not done yet. etcd takes at most `MAX_TXN_OPS` operations in a transaction (a sweep of concurrency 200
starts 200 trials in one step: 401 keys), so a batch is written in transactions of that many: the decisions
first, then the trial records in index order, the state last. The state counts the decisions: one numbered
above its count was written by a batch not finished (`decisions` leaves it out, the next batch writes over it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from controller_sidecar import keys
from controller_sidecar.errors import PermanentError, TransientError
from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.errors import SchedulerError, StoreUnavailableError
from learnerkit.scheduler.manifest.redact import redact_credentials
from learnerkit.scheduler.sweeps.decisions import Action, Decision, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.space import ParamValue

MAX_TXN_OPS = 128
"""etcd's default limit of operations in one transaction (its ``--max-txn-ops``)."""


class SweepStatus(StrEnum):
    RUNNING = "running"
    HALTED = "halted"
    """No trial starts or is promoted; running trials were halted onto their checkpoints."""
    CANCELLED = "cancelled"
    DONE = "done"
    FAILED = "failed"
    """Its step or its stored records failed in a way a retry cannot fix; the state's reason says how."""

    @property
    def terminal(self) -> bool:
        return self in (SweepStatus.CANCELLED, SweepStatus.DONE, SweepStatus.FAILED)

    def refuses(self, verb: SweepVerb) -> str | None:
        """Why a sweep in this state refuses ``verb``, the end of "sweep ID ..."; None where it takes it. The one
        rule: the facade's sweep verbs refuse by it, the console's sweep page offers only what it allows."""
        if verb == "halt" and self is not SweepStatus.RUNNING:
            return f"is {self.value}: only a running sweep halts"
        if verb == "resume" and self is not SweepStatus.HALTED:
            return f"is {self.value}: only a halted sweep resumes"
        if verb == "cancel" and self.terminal:
            return f"is {self.value} already"
        return None


SweepVerb = Literal["halt", "resume", "cancel"]


@dataclass(frozen=True)
class SweepSpecRecord:
    sweep_id: str
    tenant: str
    submitted_at: float
    search_text: str
    search_source: str
    manifest_text: str
    manifest_source: str
    submission: Mapping[str, Any] = field(default_factory=dict)
    """The submit's options (`SubmitOptions.to_raw`): the model code every trial runs."""
    credentials_deleted: bool = False
    """The manifest's store credentials were redacted when the sweep ended."""

    def to_raw(self) -> dict[str, Any]:
        deleted = {"credentials": "deleted"} if self.credentials_deleted else {}
        return {
            **deleted,
            "sweep_id": self.sweep_id,
            "tenant": self.tenant,
            "submitted_at": self.submitted_at,
            "search": {"text": self.search_text, "source": self.search_source},
            "manifest": {"text": self.manifest_text, "source": self.manifest_source},
            "submission": dict(self.submission),
        }

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> SweepSpecRecord:
        return cls(
            sweep_id=str(raw["sweep_id"]),
            tenant=str(raw["tenant"]),
            submitted_at=float(raw["submitted_at"]),
            search_text=str(raw["search"]["text"]),
            search_source=str(raw["search"]["source"]),
            manifest_text=str(raw["manifest"]["text"]),
            manifest_source=str(raw["manifest"]["source"]),
            submission=dict(raw.get("submission") or {}),
            credentials_deleted=raw.get("credentials") == "deleted",
        )


@dataclass(frozen=True)
class StoredTrial:
    record: TrialRecord
    job_id: str
    parameters: Mapping[str, ParamValue]
    rung_attempt: int = 1
    """The job attempt that trains towards `record.target`: an older attempt's end is not this rung's end."""
    freed_bytes: int = 0
    """What removing its checkpoints freed in the object store (a stopped trial's)."""
    parent: int | None = None
    """PBT: the trial whose checkpoint this one started from (its lineage, followed back)."""
    in_place_attempt: int | None = None
    """The job attempt in which it was last promoted in place (its learner trains on without a redeploy): an end of
    that attempt with nothing trained past the boundary means the learner did not take it."""
    remove_at_end: bool = False
    """Stopped while its job still ran (answered no at its boundary, its learner checkpoints and ends): its
    checkpoints are removed once that job has ended, so none is written after the removal."""

    def to_raw(self) -> dict[str, Any]:
        r = self.record
        return {
            "index": r.index,
            "state": r.state.value,
            "target": r.target,
            "results": list(r.results),
            "reason": r.reason,
            "job_id": self.job_id,
            "parameters": dict(self.parameters),
            "rung_attempt": self.rung_attempt,
            "freed_bytes": self.freed_bytes,
            **({"parent": self.parent} if self.parent is not None else {}),
            **({"in_place_attempt": self.in_place_attempt} if self.in_place_attempt is not None else {}),
            **({"remove_at_end": True} if self.remove_at_end else {}),
        }

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> StoredTrial:
        record = TrialRecord(
            int(raw["index"]),
            TrialState(raw["state"]),
            int(raw["target"]),
            tuple(float(v) for v in raw["results"]),
            str(raw.get("reason", "")),
        )
        return cls(
            record,
            str(raw["job_id"]),
            dict(raw["parameters"]),
            int(raw.get("rung_attempt", 1)),
            int(raw.get("freed_bytes", 0)),
            int(raw["parent"]) if raw.get("parent") is not None else None,
            int(raw["in_place_attempt"]) if raw.get("in_place_attempt") is not None else None,
            raw.get("remove_at_end") is True,
        )


@dataclass(frozen=True)
class SweepState:
    status: SweepStatus = SweepStatus.RUNNING
    decisions: int = 0
    reason: str = ""

    def to_raw(self) -> dict[str, Any]:
        return {"status": self.status.value, "decisions": self.decisions, "reason": self.reason}

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> SweepState:
        return cls(SweepStatus(raw["status"]), int(raw["decisions"]), str(raw.get("reason", "")))


@dataclass(frozen=True)
class StoredSweep:
    spec: SweepSpecRecord
    state: SweepState
    trials: dict[int, StoredTrial]


def sweeps_root(jobs_root: str = keys.ROOT) -> str:
    """``/learnerkit/sweeps`` beside ``/learnerkit/jobs``."""
    parent = jobs_root.rstrip("/").rsplit("/", 1)[0]
    return f"{parent}/sweeps"


def sweep_credentials_key(sweep_id: str, jobs_root: str = keys.ROOT) -> str:
    """``/learnerkit/credentials/sweeps/<sweep_id>`` beside ``/learnerkit/jobs``: outside the sweeps' prefix and
    the event hub's watched range (``/learnerkit/jobs/`` .. the end of ``/learnerkit/sweeps/``)."""
    parent = jobs_root.rstrip("/").rsplit("/", 1)[0]
    return f"{parent}/credentials/sweeps/{sweep_id}"


def _spec_raw(spec: SweepSpecRecord) -> str:
    """The spec as etcd keeps it: its manifest's credentials redacted (they lie under `sweep_credentials_key`)."""
    return json.dumps(replace(spec, manifest_text=redact_credentials(spec.manifest_text)).to_raw(), sort_keys=True)


def _credentials_raw(spec: SweepSpecRecord) -> str:
    return json.dumps({"manifest": spec.manifest_text, "source": spec.manifest_source})


def _decision_raw(decision: Decision) -> str:
    return json.dumps(
        {
            "action": decision.action.value,
            "trial": decision.trial,
            "rung": decision.rung,
            "budget": decision.budget,
            "reason": decision.reason,
        },
        sort_keys=True,
    )


def decision_from_raw(raw: Mapping[str, Any]) -> Decision:
    return Decision(Action(raw["action"]), int(raw["trial"]), int(raw["rung"]), int(raw["budget"]), str(raw["reason"]))


class SweepStore:
    def __init__(self, etcd: EtcdStore, jobs_root: str = keys.ROOT) -> None:
        self.etcd = etcd
        self.root = sweeps_root(jobs_root)
        self.jobs_root = jobs_root

    def _prefix(self, sweep_id: str) -> str:
        return f"{self.root}/{sweep_id}/"

    def _credentials_key(self, sweep_id: str) -> str:
        return sweep_credentials_key(sweep_id, self.jobs_root)

    async def create(self, spec: SweepSpecRecord) -> bool:
        """The sweep's spec (credentials redacted), its credentials apart and its first state in one transaction,
        unless a sweep of that id exists."""
        prefix = self._prefix(spec.sweep_id)
        items = {
            f"{prefix}spec": _spec_raw(spec),
            self._credentials_key(spec.sweep_id): _credentials_raw(spec),
            f"{prefix}tenant": spec.tenant,
            f"{prefix}state": json.dumps(SweepState().to_raw(), sort_keys=True),
        }
        try:
            return await self.etcd.create_all(f"{prefix}spec", items)
        except TransientError as e:
            raise StoreUnavailableError(f"storing sweep {spec.sweep_id}: etcd does not answer: {e}") from e

    async def tenant(self, sweep_id: str) -> str | None:
        """The sweep's tenant, from its ``tenant`` key (its spec for a sweep stored without one); None: no sweep."""
        prefix = self._prefix(sweep_id)
        found = await self.etcd.get(f"{prefix}tenant")
        if found is not None:
            return found[0].decode()
        spec = await self.etcd.get(f"{prefix}spec")
        return None if spec is None else str(json.loads(spec[0])["tenant"])

    async def delete_credentials(self, spec: SweepSpecRecord) -> SweepSpecRecord:
        """Delete the sweep's credentials and mark its spec so, in one transaction: an ended sweep starts no trial
        again."""
        redacted = replace(spec, manifest_text=redact_credentials(spec.manifest_text), credentials_deleted=True)
        spec_key = f"{self._prefix(spec.sweep_id)}spec"
        try:
            await self.etcd.put_all({spec_key: _spec_raw(redacted)}, delete=(self._credentials_key(spec.sweep_id),))
        except TransientError as e:
            raise StoreUnavailableError(
                f"deleting the credentials of sweep {spec.sweep_id}: etcd does not answer: {e}"
            ) from e
        return redacted

    async def move_credentials(self, spec: SweepSpecRecord) -> None:
        """A sweep stored with its credentials in its spec (the layout before `sweep_credentials_key`): the spec
        redacted and the credentials under their own key, in one transaction."""
        items = {
            f"{self._prefix(spec.sweep_id)}spec": _spec_raw(spec),
            self._credentials_key(spec.sweep_id): _credentials_raw(spec),
        }
        try:
            await self.etcd.put_all(items)
        except TransientError as e:
            raise StoreUnavailableError(
                f"moving the credentials of sweep {spec.sweep_id}: etcd does not answer: {e}"
            ) from e

    async def record(
        self, sweep_id: str, state: SweepState, decisions: Sequence[Decision], trials: Sequence[StoredTrial]
    ) -> SweepState:
        """Decisions, the trial records they changed and the sweep's state, in transactions of at most
        `MAX_TXN_OPS` (the module's docstring says in what order); the new state once all are written."""
        prefix = self._prefix(sweep_id)
        items: list[tuple[str, str]] = []
        for n, decision in enumerate(decisions, start=state.decisions + 1):
            items.append((f"{prefix}decisions/{n:010d}", _decision_raw(decision)))
        for trial in sorted(trials, key=lambda t: t.record.index):
            items.append((f"{prefix}trials/{trial.record.index:06d}", json.dumps(trial.to_raw(), sort_keys=True)))
        new_state = SweepState(state.status, state.decisions + len(decisions), state.reason)
        items.append((f"{prefix}state", json.dumps(new_state.to_raw(), sort_keys=True)))
        try:
            for start in range(0, len(items), MAX_TXN_OPS):
                await self.etcd.put_all(dict(items[start : start + MAX_TXN_OPS]))
        except TransientError as e:
            raise StoreUnavailableError(f"recording sweep {sweep_id}: etcd does not answer: {e}") from e
        except PermanentError as e:  # its message lists every key: the reason alone is kept
            why = str(e).rpartition(": etcd ")[2]
            raise SchedulerError(f"recording sweep {sweep_id}: etcd refused {len(items)} writes: etcd {why}") from e
        return new_state

    async def decisions(self, sweep_id: str) -> list[Decision]:
        """Every decision the state counts (one above its count belongs to a batch not finished)."""
        prefix = self._prefix(sweep_id)
        state = await self.etcd.get(f"{prefix}state")
        counted = SweepState.from_raw(json.loads(state[0])).decisions if state is not None else 0
        found = await self.etcd.get_prefix(f"{prefix}decisions/")
        return [decision_from_raw(json.loads(found[key])) for key in sorted(found)[:counted]]

    async def fail(self, sweep_id: str, reason: str) -> None:
        """Mark a sweep failed whose records cannot be restored (its state's count of decisions kept if it reads),
        its credentials deleted in the same transaction (no driver holds it to delete them as it ends); one failed
        already keeps its state."""
        key = f"{self._prefix(sweep_id)}state"
        try:
            found = await self.etcd.get(key)
            try:
                stored = SweepState.from_raw(json.loads(found[0])) if found is not None else SweepState()
            except (KeyError, ValueError, TypeError):
                stored = SweepState()
            if stored.status is SweepStatus.FAILED:
                return  # failed at an earlier start: its first reason stays
            state = SweepState(SweepStatus.FAILED, stored.decisions, reason)
            await self.etcd.put_all(
                {key: json.dumps(state.to_raw(), sort_keys=True)}, delete=(self._credentials_key(sweep_id),)
            )
        except TransientError as e:
            raise StoreUnavailableError(f"failing sweep {sweep_id}: etcd does not answer: {e}") from e

    async def load_all(self) -> LoadedSweeps:
        """Every sweep, for a restarted scheduler, its spec's manifest with the credentials kept apart; one whose
        spec is missing is skipped, one whose records cannot be read is named in `unreadable` with the reason (the
        others are restored all the same). A sweep stored with its credentials in its spec has them moved out."""
        by_sweep: dict[str, dict[str, bytes]] = {}
        async for key, value in self.etcd.iter_prefix(f"{self.root}/"):
            sweep_id, _, rest = key[len(self.root) + 1 :].partition("/")
            if not rest.startswith("decisions/"):
                by_sweep.setdefault(sweep_id, {})[rest] = value
        credentials_root = self._credentials_key("")
        apart = {key[len(credentials_root) :]: value async for key, value in self.etcd.iter_prefix(credentials_root)}
        loaded = LoadedSweeps()
        for sweep_id, found in sorted(by_sweep.items()):
            if "spec" not in found or "state" not in found:
                continue
            try:
                trials = {
                    int(rest.split("/", 1)[1]): StoredTrial.from_raw(json.loads(value))
                    for rest, value in found.items()
                    if rest.startswith("trials/")
                }
                spec = SweepSpecRecord.from_raw(json.loads(found["spec"]))
                state = SweepState.from_raw(json.loads(found["state"]))
                if sweep_id in apart:
                    spec = replace(spec, manifest_text=str(json.loads(apart[sweep_id])["manifest"]))
                elif not spec.credentials_deleted:
                    await self.move_credentials(spec)
                loaded.sweeps.append(StoredSweep(spec, state, trials))
            except (KeyError, ValueError, TypeError, AttributeError) as e:
                loaded.unreadable[sweep_id] = f"its records in etcd cannot be read: {type(e).__name__}: {e}"
        return loaded


@dataclass
class LoadedSweeps:
    sweeps: list[StoredSweep] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    """The sweeps whose records cannot be read, and why."""
