"""A job's status and reason from its learners' records."""

from __future__ import annotations

from datetime import UTC, datetime

from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.jobs.aggregate import aggregate
from learnerkit.scheduler.jobs.state import JobStatus


def record(n: int, phase: Phase, message: str = "") -> StatusRecord:
    return StatusRecord(phase, datetime.now(UTC), n, sequence=1, message=message)


def test_a_halted_reason_says_halted_once_and_names_the_learner() -> None:
    records = {
        1: record(1, Phase.COMPLETED),
        2: record(2, Phase.HALTED, "halted (halt requested, exit code 143)"),
    }
    result = aggregate(2, records, first_sequence=1)
    assert result.status is JobStatus.HALTED
    assert result.reason == "learner 2 halted (halt requested, exit code 143)"


def test_a_halted_record_with_another_message_keeps_it() -> None:
    result = aggregate(1, {1: record(1, Phase.HALTED, "checkpoint stored")}, first_sequence=1)
    assert result.reason == "learner 1 halted: checkpoint stored"
