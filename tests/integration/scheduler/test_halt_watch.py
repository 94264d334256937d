"""The loop is woken as soon as a halting job's learner writes a status, in the real etcd: the dead time between
a preempted victim's end and the preemptor's admission is no longer a step interval."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.status import Phase, StatusRecord
from learnerkit.scheduler.core.halting import HaltWatch
from learnerkit.scheduler.jobs.store import JobStore

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(60)]


def test_a_status_written_by_a_halting_jobs_learner_wakes_the_loop(etcd_server: Any) -> None:
    root = f"/lk-haltwatch-{uuid.uuid4().hex[:8]}/jobs"
    halted = StatusRecord(Phase.HALTED, datetime.now(UTC), learner_id=0, sequence=7)

    async def run() -> tuple[bool, bool, bool, frozenset[str]]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        wake = asyncio.Event()
        watch = HaltWatch(JobStore(etcd, root), wake)
        try:
            watch.follow(["job-victim"])
            await etcd.put(keys.learner_metrics_key("job-victim", 0, root), '{"loss": 1.0}')
            await etcd.put(keys.learner_status_key("job-other", 0, root), halted.to_json())
            quiet = await _woken(wake, 1.0)
            await etcd.put_status("job-victim", halted, root)
            woken = await _woken(wake, 20.0)
            watch.follow([])
            after = watch.watched
            wake.clear()
            await etcd.put_status("job-victim", halted, root)
            late = await _woken(wake, 1.0)
            return quiet, woken, late, after
        finally:
            await watch.stop()
            await etcd.delete_prefix(root)
            await etcd.close()

    quiet, woken, late, after = asyncio.run(run())
    assert not quiet, "a metric, or another job's status, wakes nothing"
    assert woken, "the victim's status woke the loop"
    assert after == frozenset() and not late, "a job no longer halting is watched no more"


async def _woken(wake: asyncio.Event, timeout: float) -> bool:
    try:
        await asyncio.wait_for(wake.wait(), timeout)
    except TimeoutError:
        return False
    return True
