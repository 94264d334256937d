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


def outcome_of(exit_record: LearnerExit, *, halt_requested: bool) -> Outcome:
    """A halted run is never COMPLETED: a halt asked for ends HALTED whatever the command returned."""
    code = exit_record.exit_code
    if halt_requested or exit_record.halt_requested or exit_record.reason == "halted_before_start":
        if exit_record.reason == "halt_timeout":
            return Outcome(Phase.HALTED, ErrorCode.HALT_TIMEOUT, "halted: killed after the halt grace period", code)
        return Outcome(Phase.HALTED, ErrorCode.NONE, f"halted ({exit_record.reason}, exit code {code})", code)
    if exit_record.reason == "completed" and code == 0:
        return Outcome(Phase.COMPLETED, ErrorCode.NONE, "completed", 0)
    if exit_record.reason == "killed" or code == OOM_EXIT_CODE:
        return Outcome(
            Phase.FAILED,
            ErrorCode.LEARNER_KILLED,
            f"killed (SIGKILL, exit code {code}): most likely out of memory",
            code,
        )
    detail = f": {exit_record.error}" if exit_record.error else ""
    died = f" ({exit_record.signal})" if exit_record.signal else ""
    return Outcome(
        Phase.FAILED, ErrorCode.LEARNER_FAILED, f"{exit_record.reason}, exit code {code}{died}{detail}", code
    )
