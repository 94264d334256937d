"""The attempts history in the real etcd: written and read back in order, kept when a finished job is trimmed,
removed with the job."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, load_attempts, save_attempt
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.store import JobStore

pytestmark = [pytest.mark.integration, pytest.mark.services]


def test_attempts_round_trip_in_order_survive_the_trim_and_go_with_the_job(etcd_server: Any) -> None:
    root = f"/lk-attempts-{uuid.uuid4().hex[:8]}/jobs"
    job_id = "job-attempts1"

    async def run() -> tuple[list[Attempt], list[Attempt], list[Attempt]]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            store = JobStore(etcd, root)
            assert await store.create(JobState(job_id, "team-a", "j", 0.0), {"job_id": job_id}, "m", "m.yml")
            written = [
                Attempt(n, ("local",), f"2026-11-24T20:{n:02d}:00Z", resumed_from=n - 1 if n > 1 else None)
                for n in range(1, 12)
            ]
            written[0] = written[0].ended(AttemptEnd.PREEMPTED, "preempted by job job-x", "t", work_lost_s=0.0)
            for attempt in reversed(written):
                await save_attempt(store, job_id, attempt)
            read = await load_attempts(store, job_id)
            await store.trim(job_id)
            trimmed = await load_attempts(store, job_id)
            await store.delete(job_id)
            return written, read, trimmed + await load_attempts(store, job_id)
        finally:
            await etcd.close()

    written, read, after = asyncio.run(run())
    assert read == written  # attempt 10 after 9, not after 1
    assert read[0].ended_by is AttemptEnd.PREEMPTED and read[0].work_lost_s == 0.0
    assert after == written  # the trim kept them all; the delete left none
