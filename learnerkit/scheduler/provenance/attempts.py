"""The attempts of a job as the provenance names them, from the one place that knows where attempts come from.

`attempt_facts` reads what the scheduler records today: the job's status history (``history/job-<n>``: status,
reason, timestamp and attempt of every change) and its current state (``attempt``). Every attempt but the first
restored the checkpoints of the one before it (`Transitions.requeue`); the step it restored is what its sidecar
reported (``restored_step`` of its record). A job's end trims its history, so the attempts before a resume come
from the job's previous provenance (signed at that end, and opened with the platform's key):
`earlier_attempts`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TERMINAL = frozenset({"COMPLETED", "FAILED", "HALTED", "CANCELLED"})
ATTEMPTS = "attempts"
"""The byproduct of a provenance statement that lists the attempts."""


@dataclass(frozen=True)
class AttemptFact:
    number: int
    nodes: tuple[str, ...]
    """Where the attempt ran, as the scheduler placed it (known for the attempt that ends the job, and for earlier
    ones that ended the job before a resume)."""
    started_at: str
    """When the attempt was first seen past QUEUED (else when it was queued); ISO-8601 UTC."""
    ended_at: str | None
    ended_by: str | None
    """The attempt's last status (COMPLETED, FAILED, HALTED, CANCELLED), or RESTARTED when a next attempt followed."""
    reason: str
    resumed_from: int | None
    restored_step: int | None
    """The step of the checkpoint it restored, as its sidecar reported it."""
    checkpoint_digest: str | None = None
    """The SHA-256 of that checkpoint's marker (its files, sizes and ETags), as its sidecar read it."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "nodes": list(self.nodes),
            "startedAt": self.started_at,
            "endedAt": self.ended_at,
            "endedBy": self.ended_by,
            "reason": self.reason,
            "resumedFrom": self.resumed_from,
            "restoredStep": self.restored_step,
            "checkpointSha256": self.checkpoint_digest,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AttemptFact:
        return cls(
            number=int(raw["number"]),
            nodes=tuple(str(node) for node in raw.get("nodes", [])),
            started_at=str(raw["startedAt"]),
            ended_at=raw.get("endedAt"),
            ended_by=raw.get("endedBy"),
            reason=str(raw.get("reason", "")),
            resumed_from=raw.get("resumedFrom"),
            restored_step=raw.get("restoredStep"),
            checkpoint_digest=raw.get("checkpointSha256"),
        )


_NOWHERE = AttemptFact(0, (), "", None, None, "", None, None)


def earlier_attempts(statement: Mapping[str, Any]) -> list[AttemptFact]:
    """The attempts a job's previous provenance statement lists."""
    for byproduct in statement.get("predicate", {}).get("runDetails", {}).get("byproducts", []):
        if byproduct.get("name") == ATTEMPTS:
            return [AttemptFact.from_dict(raw) for raw in byproduct.get("annotations", {}).get("attempts", [])]
    return []


def attempt_facts(
    history: Sequence[Mapping[str, Any]],
    current: int,
    restored: Mapping[int, tuple[int | None, str | None]],
    earlier: Sequence[AttemptFact] = (),
    nodes: Sequence[str] = (),
) -> list[AttemptFact]:
    """One fact per attempt, 1 to ``current``, from the job's history entries in order; an attempt the history no
        longer holds (trimmed at an earlier end) as ``earlier`` gave it. ``restored``: per attempt, the checkpoint step
    and marker digest its sidecar restored; ``nodes``: where attempt ``current`` ran."""
    entries: dict[int, list[Mapping[str, Any]]] = {}
    for entry in history:
        entries.setdefault(int(entry.get("attempt", 1)), []).append(entry)
    known = {fact.number: fact for fact in earlier}
    facts = []
    for number in range(1, current + 1):
        own = entries.get(number, [])
        if not own and number in known:
            facts.append(known[number])
            continue
        running = [e for e in own if e.get("status") != "QUEUED"]
        started = str((running or own or [{}])[0].get("timestamp", ""))
        last = own[-1] if own else {}
        later = entries.get(number + 1)
        status = str(last.get("status", ""))
        if later:
            ended_by: str | None = status if status in TERMINAL else "RESTARTED"
            ended_at: str | None = str(last.get("timestamp")) if status in TERMINAL else str(later[0].get("timestamp"))
        else:
            ended_by = status if status in TERMINAL else None
            ended_at = str(last.get("timestamp")) if ended_by else None
        facts.append(
            AttemptFact(
                number=number,
                nodes=tuple(nodes) if number == current else known.get(number, _NOWHERE).nodes,
                started_at=started,
                ended_at=ended_at,
                ended_by=ended_by,
                reason=str((later or [last])[0].get("reason", "")) if later else str(last.get("reason", "")),
                resumed_from=number - 1 if number > 1 else None,
                restored_step=restored.get(number, (None, None))[0],
                checkpoint_digest=restored.get(number, (None, None))[1],
            )
        )
    return facts
