"""The attempts of a job as the provenance names them: the scheduler's attempts history
(`learnerkit.scheduler.jobs.attempts`: where each attempt ran, when, how and why it ended, the attempt it resumed
from, the work lost) joined with what each attempt's sidecar read as it restored a checkpoint (the step and the
SHA-256 of the checkpoint's marker)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from learnerkit.scheduler.jobs.attempts import Attempt

ATTEMPTS = "attempts"
"""The byproduct of a provenance statement that lists the attempts."""


@dataclass(frozen=True)
class AttemptFact:
    number: int
    nodes: tuple[str, ...]
    started_at: str
    """When the attempt was deployed; ISO-8601 UTC."""
    ended_at: str | None
    ended_by: str | None
    """How it ended (`AttemptEnd`: COMPLETED, FAILED, HALTED, PREEMPTED, NODE_LOST, DRAINED, CANCELLED, RESTARTED)."""
    reason: str
    resumed_from: int | None
    restored_step: int | None
    """The step of the checkpoint it restored, as its sidecar reported it."""
    checkpoint_digest: str | None = None
    """The SHA-256 of that checkpoint's marker (its files, sizes and ETags), as its sidecar read it."""
    work_lost_s: float | None = None
    steps_lost: int | None = None

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
            "workLostSeconds": self.work_lost_s,
            "stepsLost": self.steps_lost,
        }


def attempt_facts(
    attempts: Sequence[Attempt], restored: Mapping[int, tuple[int | None, str | None]]
) -> list[AttemptFact]:
    """One fact per attempt of the history. ``restored``: per attempt, the checkpoint step and marker digest its
    sidecar restored (the marker digest the sidecar read wins over the history's, which the scheduler may lack)."""
    facts = []
    for attempt in attempts:
        step, digest = restored.get(attempt.number, (None, None))
        facts.append(
            AttemptFact(
                number=attempt.number,
                nodes=attempt.nodes,
                started_at=attempt.started_at,
                ended_at=attempt.ended_at,
                ended_by=attempt.ended_by.value if attempt.ended_by else None,
                reason=attempt.reason,
                resumed_from=attempt.resumed_from,
                restored_step=step,
                checkpoint_digest=digest or attempt.checkpoint_digest,
                work_lost_s=attempt.work_lost_s,
                steps_lost=attempt.steps_lost,
            )
        )
    return facts
