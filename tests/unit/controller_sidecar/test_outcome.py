"""How learner.exit records map to terminal phases: halted is never COMPLETED, 137 reads as killed."""

from __future__ import annotations

import pytest

from controller_sidecar.control import LearnerExit
from controller_sidecar.outcome import Outcome, outcome_of
from controller_sidecar.outputs import StoredTree, stored_again
from controller_sidecar.resultkeys import ResultRefused
from controller_sidecar.status import ErrorCode, Phase


@pytest.mark.parametrize(
    ("record", "halt", "phase", "code"),
    [
        (LearnerExit(0, "completed"), False, Phase.COMPLETED, ErrorCode.NONE),
        (LearnerExit(3, "failed"), False, Phase.FAILED, ErrorCode.LEARNER_FAILED),
        (LearnerExit(137, "killed", signal="SIGKILL"), False, Phase.FAILED, ErrorCode.LEARNER_KILLED),
        (LearnerExit(143, "halted", signal="SIGTERM", halt_requested=True), True, Phase.HALTED, ErrorCode.NONE),
        (LearnerExit(0, "completed"), True, Phase.HALTED, ErrorCode.NONE),
        (LearnerExit(137, "halt_timeout", halt_requested=True), True, Phase.HALTED, ErrorCode.HALT_TIMEOUT),
        (LearnerExit(0, "halted_before_start"), False, Phase.HALTED, ErrorCode.NONE),
        (LearnerExit(127, "failed", error="not found"), False, Phase.FAILED, ErrorCode.LEARNER_FAILED),
    ],
)
def test_outcome_of(record: LearnerExit, halt: bool, phase: Phase, code: ErrorCode) -> None:
    outcome = outcome_of(record, halt_requested=halt)
    assert (outcome.phase, outcome.error_code, outcome.exit_code) == (phase, code, record.exit_code)


def test_killed_message_says_out_of_memory() -> None:
    outcome = outcome_of(LearnerExit(137, "killed", signal="SIGKILL"), halt_requested=False)
    assert "out of memory" in outcome.message and "137" in outcome.message


def test_failure_message_keeps_learner_run_error() -> None:
    outcome = outcome_of(LearnerExit(127, "failed", error="python3: not found"), halt_requested=False)
    assert "python3: not found" in outcome.message and "127" in outcome.message


def test_outputs_stored_again_by_a_restarted_sidecar_say_which_are_complete() -> None:
    done = Outcome(Phase.COMPLETED, ErrorCode.NONE, "completed", 0)
    assert stored_again(done, StoredTree(size=3, files=3), storing_starts=1) == done
    again = stored_again(done, StoredTree(size=3, files=3), storing_starts=2)
    assert again.message == "completed; outputs stored again after 1 interrupted attempt(s): 3 result file(s) complete"
    refused = StoredTree(files=2, refused=[ResultRefused("x" * 2000, "key too long")])
    assert stored_again(done, refused, storing_starts=3).message.endswith(
        "after 2 interrupted attempt(s): 2 result file(s) complete, 1 not stored"
    )
