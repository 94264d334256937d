"""A job's status from its learners' statuses (pure).

The job is as far as its slowest learner: DOWNLOADING only when every learner is DOWNLOADING or beyond,
PROCESSING when every one is processing or beyond... It FAILED as soon as any learner failed (the others
are then torn down), HALTED when every learner ended and one halted, COMPLETED when all completed.
Records of an earlier attempt (a lower sequence) do not count: that learner has not reported yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.jobs.state import JobStatus

ORDER = [Phase.PENDING, Phase.DOWNLOADING, Phase.PROCESSING, Phase.STORING]


@dataclass(frozen=True)
class Aggregate:
    status: JobStatus
    reason: str = ""


def aggregate(
    learners: int, records: Mapping[int, StatusRecord], *, first_sequence: int, lost: Mapping[int, str] | None = None
) -> Aggregate:
    """The job's status from ``records`` (learner id -> latest record) and the learners seen ``lost``."""
    current = {n: r for n, r in records.items() if r.sequence >= first_sequence and 1 <= n <= learners}
    for n, record in sorted(current.items()):
        if record.phase is Phase.FAILED:
            code = f" exit code {record.exit_code}" if record.exit_code is not None else ""
            return Aggregate(JobStatus.FAILED, f"learner {n} failed:{code} {record.message}".rstrip())
    for n, why in sorted((lost or {}).items()):
        if n not in current or not current[n].phase.terminal:
            return Aggregate(JobStatus.FAILED, f"learner {n} lost: {why}")
    phases = [current[n].phase if n in current else Phase.PENDING for n in range(1, learners + 1)]
    if all(phase.terminal for phase in phases):
        halted = [n for n, phase in enumerate(phases, 1) if phase is Phase.HALTED]
        if halted:
            return Aggregate(JobStatus.HALTED, _halted(halted[0], current[halted[0]].message))
        # A learner that completed with more to say (its outputs stored again by a restarted sidecar) says it here.
        notes = [f"learner {n} {r.message}" for n, r in sorted(current.items()) if r.message not in ("", "completed")]
        return Aggregate(JobStatus.COMPLETED, "; ".join(notes))
    slowest = min((phase for phase in phases if not phase.terminal), key=ORDER.index)
    return Aggregate(JobStatus(slowest.value), "")


def _halted(n: int, message: str) -> str:
    """``learner 2 halted (halt requested, exit code 143)``: the sidecar's message says "halted" itself."""
    return f"learner {n} {message}" if message.startswith("halted") else f"learner {n} halted: {message}".rstrip(": ")
