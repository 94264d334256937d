"""One etcd change under the jobs' or the sweeps' root as the event a tenant sees, or nothing (keys no page shows).

A job's keys (``controller_sidecar.keys``): ``status`` (the scheduler's JSON `JobState`), ``attempts/<n>``,
``learners/<n>/status`` (a sidecar's status record), ``learners/<n>/alive`` (held on the sidecar's lease) and
``learners/<n>/metrics``. History, provenance, the spec, halt and release marks make no event: what they change
shows through the keys above. A sweep's ``state`` (`sweeps.store`: running, halted, cancelled, done, failed, and
its decisions' count) is its event; its spec, trials and decisions make none (its trials are jobs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from controller_sidecar.etcdstore import WatchEvent
from learnerkit.scheduler.sweeps.store import sweeps_root

LAST = 2**62
"""An index after every event's of a revision: ``Position(r, LAST)`` is "all of revision r"."""


@dataclass(frozen=True, order=True)
class Position:
    """Where an event lies in the stream: etcd's revision, then its place among that revision's events (one
    transaction writes several keys at one revision). Its text, ``<revision>.<index>``, is the SSE event id."""

    revision: int
    index: int

    def __str__(self) -> str:
        return f"{self.revision}.{self.index}"

    @classmethod
    def parse(cls, text: str) -> Position | None:
        """None for text that is no position (a client's stale or made-up id): it then gets a snapshot."""
        revision, _, index = text.strip().partition(".")
        if not (revision.isdigit() and index.isdigit()) or len(text) > 40:
            return None
        return cls(int(revision), int(index))


@dataclass(frozen=True)
class Change:
    """What a key's change says, before it has a position and a tenant."""

    kind: str
    """The SSE event name: ``job``, ``job-deleted``, ``attempt``, ``learner``, ``metrics``, ``sweep``."""
    job_id: str
    """The job's id; empty for a sweep's change."""
    data: dict[str, Any]
    tenant: str | None = None
    """Named by the change itself (a job's status holds its tenant); else the hub looks it up."""
    sweep_id: str = ""
    """A sweep's change: the sweep's id."""

    @property
    def subject(self) -> str:
        """What the change is of, as the hub keeps tenants: the job id, or ``sweep <id>``."""
        return self.job_id or f"sweep {self.sweep_id}"

    def ids(self) -> dict[str, str]:
        """The id an event's data starts with: ``job_id``, or a sweep's ``sweep_id``."""
        return {"sweep_id": self.sweep_id} if self.sweep_id else {"job_id": self.job_id}


@dataclass(frozen=True)
class Event:
    position: Position
    tenant: str
    change: Change

    def sse(self) -> bytes:
        """The event as Server-Sent Events text: its id, its name and one line of JSON."""
        body = json.dumps({**self.change.ids(), **self.change.data}, separators=(",", ":"))
        return f"id: {self.position}\nevent: {self.change.kind}\ndata: {body}\n\n".encode()

    def as_json(self) -> dict[str, Any]:
        return {"id": str(self.position), "event": self.change.kind, **self.change.ids(), **self.change.data}


JOB_FIELDS = ("status", "reason", "attempt", "restarts", "updated_at", "name")
LEARNER_FIELDS = ("status", "message", "exit_code")


SWEEP_FIELDS = ("status", "reason", "decisions")


def change_of(event: WatchEvent, root: str) -> Change | None:
    """The change ``event`` (under ``root``, the jobs' prefix without its slash, or the sweeps' beside it) makes for
    a tenant; None for keys no page shows and for values that do not parse (a half-written or foreign key is
    skipped, not fatal)."""
    prefix = root.rstrip("/") + "/"
    if not event.key.startswith(prefix):
        return _sweep(event, sweeps_root(root) + "/")
    job_id, _, rest = event.key[len(prefix) :].partition("/")
    parts = rest.split("/")
    try:
        if parts == ["status"]:
            return _job(job_id, event.value)
        if len(parts) == 2 and parts[0] == "attempts" and parts[1].isdigit() and event.value is not None:
            return Change("attempt", job_id, {"attempt": int(parts[1])})
        if len(parts) == 3 and parts[0] == "learners" and parts[1].isdigit():
            return _learner(job_id, int(parts[1]), parts[2], event.value)
    except (ValueError, TypeError, AttributeError):
        return None
    return None


def _sweep(event: WatchEvent, prefix: str) -> Change | None:
    sweep_id, _, rest = event.key.removeprefix(prefix).partition("/")
    if not event.key.startswith(prefix) or rest != "state" or event.value is None:
        return None
    try:
        raw = json.loads(event.value)
        data = {k: raw[k] for k in SWEEP_FIELDS if k in raw}
    except (ValueError, TypeError):
        return None
    return Change("sweep", "", data, sweep_id=sweep_id)


def _job(job_id: str, value: bytes | None) -> Change:
    if value is None:
        return Change("job-deleted", job_id, {})
    raw = json.loads(value)
    return Change("job", job_id, {k: raw[k] for k in JOB_FIELDS if k in raw}, tenant=str(raw["tenant"]))


def _learner(job_id: str, learner_id: int, leaf: str, value: bytes | None) -> Change | None:
    if leaf == "alive":
        return Change("learner", job_id, {"learner_id": learner_id, "alive": value is not None})
    if value is None:
        return None  # a learner's keys cleared at a requeue or the job's end: its status says so
    raw = json.loads(value)
    if leaf == "status":
        return Change("learner", job_id, {"learner_id": learner_id} | {k: raw.get(k) for k in LEARNER_FIELDS})
    if leaf == "metrics" and isinstance(raw, dict):
        numbers = {k: v for k, v in raw.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        return Change("metrics", job_id, {"learner_id": learner_id, "metrics": numbers})
    return None
