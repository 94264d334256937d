"""A trial job's id says which sweep and trial it is; other jobs' ids say nothing."""

from __future__ import annotations

import pytest

from learnerkit.scheduler.sweeps.trialids import TrialOf, trial_job_id, trial_of


def test_a_trial_job_id_reads_back_as_its_sweep_and_trial() -> None:
    assert trial_job_id("sweep-3f9a2c1e", 7) == "sweep-3f9a2c1e-t0007"
    assert trial_of("sweep-3f9a2c1e-t0007") == TrialOf("sweep-3f9a2c1e", 7)
    assert trial_of(trial_job_id("sweep-3f9a2c1e", 12345)) == TrialOf("sweep-3f9a2c1e", 12345)


@pytest.mark.parametrize("job_id", ["job-dfd2a7c1e9b0", "job-abc-t0001", "sweep-3f9a2c1e", "sweep-3f9a2c1e-tx1", ""])
def test_other_job_ids_belong_to_no_sweep(job_id: str) -> None:
    assert trial_of(job_id) is None
