"""How a learner's end maps to the learner's terminal phase: COMPLETED, FAILED or HALTED."""

from __future__ import annotations

from dataclasses import dataclass

from controller_sidecar.control import LearnerExit
from controller_sidecar.status import ErrorCode, Phase

OOM_EXIT_CODE = 137


@dataclass(frozen=True)
class Outcome:
    phase: Phase
    error_code: ErrorCode
    message: str
    exit_code: int | None


def outcome_of(
    exit_record: LearnerExit,
    *,
    halt_requested: bool,
    oom_kills: int | None = None,
    forks_refused: int | None = None,
    job_full: str | None = None,
) -> Outcome:
    """A halted run is never COMPLETED: a halt asked for ends HALTED whatever the command returned.

    ``oom_kills``: the OOM killer's kills in the learner's cgroup, where the sidecar can read them (Docker);
    None elsewhere, where a SIGKILL is reported as most likely out of memory. ``forks_refused``: the forks the
    learner's pids limit refused (Docker); a failure after any is said to have met the limit. ``job_full``: a
    note that ``/job`` had no space left when the learner ended (:mod:`controller_sidecar.jobspace`).
    """
    full = f"; {job_full}" if job_full else ""
    code = exit_record.exit_code
    if halt_requested or exit_record.halt_requested or exit_record.reason == "halted_before_start":
        if exit_record.reason == "halt_timeout":
            return Outcome(Phase.HALTED, ErrorCode.HALT_TIMEOUT, "halted: killed after the halt grace period", code)
        return Outcome(Phase.HALTED, ErrorCode.NONE, f"halted ({exit_record.reason}, exit code {code})", code)
    if exit_record.reason == "completed" and code == 0:
        return Outcome(Phase.COMPLETED, ErrorCode.NONE, "completed", 0)
    if exit_record.reason == "killed" or code == OOM_EXIT_CODE:
        message = f"killed (SIGKILL, exit code {code}){_why(oom_kills)}{full}"
        return Outcome(Phase.FAILED, ErrorCode.LEARNER_KILLED, message, code)
    detail = f": {exit_record.error}" if exit_record.error else ""
    died = f" ({exit_record.signal})" if exit_record.signal else ""
    message = f"{exit_record.reason}, exit code {code}{died}{detail}{_pids(forks_refused)}{full}"
    return Outcome(Phase.FAILED, ErrorCode.LEARNER_FAILED, message, code)


def _pids(forks_refused: int | None) -> str:
    if not forks_refused:
        return ""
    return (
        f"; the learner reached its pids limit ({forks_refused} new processes or threads refused; raise"
        " LEARNERKIT_LEARNER_PIDS_LIMIT or start fewer)"
    )


def _why(oom_kills: int | None) -> str:
    if oom_kills is None:
        return ": most likely out of memory"
    if oom_kills > 0:
        return ": out of memory (the kernel's OOM killer ended the learner's processes; raise its memory limit)"
    return ": not by the OOM killer (something outside the learner sent SIGKILL)"
