"""What the API shows of a job: its learners' states agree with the job's."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.client.http import job_view as client_job_view
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.views import job_view
from learnerkit.scheduler.facade import SweepOfJob
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


def test_a_trial_job_says_which_sweep_and_trial_it_is_and_the_client_reads_it_back() -> None:
    job = tracked(JobStatus.COMPLETED, {})
    assert job_view(job).sweep is None
    job.state = JobState("sweep-3f9a2c1e-t0007", "team-a", "j", 0.0, status=JobStatus.COMPLETED, stage=Stage.DONE)
    view = job_view(job)
    assert view.sweep == SweepOfJob("sweep-3f9a2c1e", 7)
    sent = json.loads(json.dumps(dataclasses.asdict(view)))  # as the API sends it (`--output json` prints it)
    assert sent["sweep"] == {"sweep_id": "sweep-3f9a2c1e", "trial": 7}
    assert client_job_view(sent).sweep == SweepOfJob("sweep-3f9a2c1e", 7)
    assert client_job_view({**sent, "sweep": None}).sweep is None
