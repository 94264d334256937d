"""When a learner is lost: a lapsed lease alone never fails a running job (a blip: the sidecar renews it), a
sidecar gone from the backend without a lease does, and so does one that runs but stops renewing for the long
grace. Driven on a fake clock with the in-memory store and fake backend of ``test_learner_ended``."""

from __future__ import annotations

import pytest

from controller_sidecar.status import Phase
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.core.test_learner_ended import JOB, MANIFEST, Harness

pytestmark = pytest.mark.asyncio

TTL = SchedulerOptions.lease_ttl_s
RENEWAL_GRACE = SchedulerOptions.lease_renewal_grace_s
GONE = "learner 2 lost: its sidecar is gone from the backend and holds no lease"


@pytest.fixture
def harness() -> Harness:
    h = Harness()
    for n in (1, 2):
        h.store.report(n, Phase.PROCESSING)
    return h


async def test_a_lease_that_lapses_while_the_sidecar_runs_keeps_the_job(harness: Harness) -> None:
    await harness.step_at(0)
    harness.store.alive = {1}  # learner 2's sidecar cannot reach etcd: its lease lapsed, its container runs
    for t in (1, 2 * TTL + 1, 10 * TTL, RENEWAL_GRACE - 1):
        assert (await harness.step_at(t)).status is JobStatus.PROCESSING
    harness.store.alive = {1, 2}  # it renewed once etcd answered
    state = await harness.step_at(RENEWAL_GRACE + 5)
    assert (state.status, state.reason) == (JobStatus.PROCESSING, "")
    assert harness.tracked.missing_since == {}
    harness.store.alive = {1}  # a second blip measures from its own start
    assert (await harness.step_at(RENEWAL_GRACE + 5 + RENEWAL_GRACE - 1)).status is JobStatus.PROCESSING


async def test_a_sidecar_that_runs_but_never_renews_is_lost_after_the_renewal_grace(harness: Harness) -> None:
    await harness.step_at(0)
    harness.store.alive = {1}
    await harness.step_at(1)
    assert (await harness.step_at(1 + RENEWAL_GRACE - 1)).status is JobStatus.PROCESSING
    state = await harness.step_at(1 + RENEWAL_GRACE + 1)
    assert (state.status, state.stage) == (JobStatus.FAILED, Stage.DONE)
    assert state.reason == (f"learner 2 lost: its sidecar runs but has not renewed its lease for {RENEWAL_GRACE:.0f}s")


async def test_a_sidecar_gone_without_a_lease_is_lost_after_twice_the_ttl(harness: Harness) -> None:
    await harness.step_at(0)
    harness.store.alive = {1}
    harness.backend.running = {1}  # its container was removed (or its pod deleted)
    await harness.step_at(1)
    assert (await harness.step_at(1 + 2 * TTL - 1)).status is JobStatus.PROCESSING
    state = await harness.step_at(1 + 2 * TTL + 1)
    assert (state.status, state.reason) == (JobStatus.FAILED, GONE)
    assert harness.backend.torn_down == [JOB]


async def test_pairs_gone_while_the_scheduler_was_away_are_lost_after_its_restart(harness: Harness) -> None:
    """The records still say PROCESSING, but nothing runs and nothing holds a lease: the restarted scheduler
    (which never saw the learners alive) ends the job instead of keeping it, and its room, for ever."""
    await harness.step_at(0)
    harness.store.alive = set()
    harness.backend.running = set()
    restarted = harness.restarted()
    restarted.scheduler.shared.jobs[JOB].records = dict(harness.store.records)
    await restarted.step_at(100)
    assert (await restarted.step_at(100 + 2 * TTL - 1)).status is JobStatus.PROCESSING
    state = await restarted.step_at(100 + 2 * TTL + 1)
    assert state.status is JobStatus.FAILED
    assert state.reason.startswith("learner 1 lost: its sidecar is gone from the backend and holds no lease")


async def test_a_lost_pair_resumes_by_the_jobs_policy() -> None:
    harness = Harness()
    harness.tracked.manifest = parse_manifest(MANIFEST.replace("{halt_grace: 10}", "{halt_grace: 10, max_restarts: 1}"))
    for n in (1, 2):
        harness.store.report(n, Phase.PROCESSING)
    await harness.step_at(0)
    harness.store.alive = {1}
    harness.backend.running = {1}
    await harness.step_at(1)
    state = await harness.step_at(2 + 2 * TTL)
    assert (state.status, state.attempt, state.restarts) == (JobStatus.QUEUED, 2, 1)
    assert state.reason.startswith("waiting for "), "queued again, waiting for room (this backend has no node)"


async def test_time_without_a_lease_counts_only_over_steps_that_succeeded(harness: Harness) -> None:
    """An etcd outage the scheduler saw too counts against nobody: the sidecars had no chance to renew."""
    await harness.step_at(0)
    harness.store.alive = {1}
    harness.backend.running = {1}
    await harness.step_at(1)
    harness.store.down = True
    await harness.step_at(5 * TTL)
    harness.store.down = False
    assert (await harness.step_at(5 * TTL + 1)).status is JobStatus.PROCESSING
    assert (await harness.step_at(5 * TTL + 2 * TTL)).status is JobStatus.PROCESSING
    assert (await harness.step_at(5 * TTL + 2 * TTL + 2)).reason == GONE
