"""The job tables as people see them: ids whole at any terminal width, nothing else cut off."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from rich.console import Console

from learnerkit.scheduler.client.terminal import age, job_details, jobs_table
from learnerkit.scheduler.facade import AttemptView, JobView, LearnerView, SweepOfJob

NOW = datetime(2026, 11, 23, 20, 0, tzinfo=UTC)


def job(job_id: str = "job-dfd2a7c1e9b04f6d8a21") -> JobView:
    return JobView(
        job_id=job_id,
        tenant="demo",
        name="pytorch-mnist-training-with-a-rather-long-name",
        status="PROCESSING",
        reason="waiting for 2 GPUs of type nvidia-tesla-v100 (tenant quota 4, 2 in use)",
        submitted_at="2026-11-23T19:12:44.123456+00:00",
        updated_at="",
        priority=0,
        gpus=2,
        learners=(LearnerView(1, "PROCESSING", "training", None, {"loss": 0.25}, True),),
        restarts=0,
        results="s3://results/job-dfd2a7c1e9b04f6d8a21/attempt-1/",
    )


def rendered(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, force_terminal=False)
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("width", [60, 80, 120])
def test_job_ids_are_whole_in_the_list_at_any_width(width: int) -> None:
    jobs = [job(), job("job-0123456789abcdef0123")]
    text = rendered(jobs_table(jobs, NOW), width)
    assert "job-dfd2a7c1e9b04f6d8a21" in text and "job-0123456789abcdef0123" in text
    assert "…" not in text
    assert "PROCESSING" in text


@pytest.mark.parametrize("width", [60, 80])
def test_the_details_cut_nothing(width: int) -> None:
    text = rendered(job_details(job()), width)
    assert "job-dfd2a7c1e9b04f6d8a21" in text
    assert "…" not in text
    if width >= 80:
        assert "s3://results/job-dfd2a7c1e9b04f6d8a21/attempt-1/" in text


@pytest.mark.parametrize(
    ("submitted", "shown"),
    [("2026-11-23T19:59:18+00:00", "42s"), ("2026-11-23T19:55:00+00:00", "5m"), ("2026-11-21T20:00:00+00:00", "2d")],
)
def test_age_takes_the_largest_unit(submitted: str, shown: str) -> None:
    assert age(submitted, NOW) == shown


def test_an_unreadable_time_has_no_age() -> None:
    assert age("", NOW) == "?"


@pytest.mark.parametrize("width", [60, 80])
def test_the_attempts_cut_nothing(width: int) -> None:
    attempts = (
        AttemptView(
            1, ("node-a-very-long-name",), "t", "t", "PREEMPTED", "preempted by job job-0123456789ab", work_lost_s=1.5
        ),
        AttemptView(2, ("node-b",), "t", resumed_from=1, checkpoint_digest="ab" * 32),
    )
    text = rendered(job_details(replace(job(), attempts=attempts)), width)
    assert "node-a-very-long-name" in text and "…" not in text
    if width >= 80:  # narrower, the other columns fold onto more lines, never cut
        assert "attempt 1" in text and "1.5s" in text


def test_a_trial_job_s_details_name_its_sweep_and_trial() -> None:
    text = rendered(job_details(replace(job("sweep-3f9a2c1e-t0007"), sweep=SweepOfJob("sweep-3f9a2c1e", 7))), 80)
    assert "sweep-3f9a2c1e, trial 7" in text
    assert "sweep " not in rendered(job_details(job()), 80)
