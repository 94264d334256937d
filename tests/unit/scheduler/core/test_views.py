"""What the API shows of a job: its learners' states agree with the job's."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.views import job_view
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.core.test_learner_ended import MANIFEST


def tracked(status: JobStatus, records: dict[int, Phase]) -> Tracked:
    state = JobState("job-1", "team-a", "j", 0.0, status=status, stage=Stage.DONE)
    job = Tracked(state, parse_manifest(MANIFEST), MANIFEST, "m.yml")
    for n, phase in records.items():
        job.records[n] = StatusRecord(phase, datetime.now(UTC), n, sequence=state.first_sequence)
    return job


@pytest.mark.parametrize("status", [JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.HALTED])
def test_a_finished_jobs_learners_read_no_running_state(status: JobStatus) -> None:
    view = job_view(tracked(status, {1: Phase.PROCESSING}))
    assert [learner.status for learner in view.learners] == [status.value, status.value]


def test_a_learner_that_ended_keeps_its_own_state() -> None:
    view = job_view(tracked(JobStatus.FAILED, {1: Phase.FAILED, 2: Phase.COMPLETED}))
    assert [learner.status for learner in view.learners] == ["FAILED", "COMPLETED"]


def test_a_running_jobs_learners_show_their_records() -> None:
    job = tracked(JobStatus.PROCESSING, {1: Phase.PROCESSING})
    job.state = JobState("job-1", "team-a", "j", 0.0, status=JobStatus.PROCESSING, stage=Stage.RUNNING)
    view = job_view(job)
    assert [learner.status for learner in view.learners] == ["PROCESSING", "QUEUED"]
