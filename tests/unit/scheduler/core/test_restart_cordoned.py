"""A scheduler restarted while a node is cordoned (not listed) keeps the jobs running there: their reservation
is remade on the node as known from them, they are neither requeued nor torn down, and nothing runs twice."""

from __future__ import annotations

import pytest

from controller_sidecar.status import Phase
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.jobs.store import StoredJob
from learnerkit.scheduler.sweeps.store import LoadedSweeps, SweepStore
from tests.unit.scheduler.core.test_preemption import Harness, MemoryStore
from tests.unit.scheduler.memorymarks import MemoryMarks

pytestmark = pytest.mark.asyncio


class Reloading(MemoryStore):
    """Loads back the jobs it is given, as etcd would after a restart."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: list[StoredJob] = []

    async def load_all(self) -> list[StoredJob]:
        return list(self.stored)

    async def claim_instance(self, proposed: str, *, fixed: bool) -> str:
        return proposed


class NoSweeps(SweepStore):
    """A sweep store with no sweeps: this scheduler runs jobs alone."""

    def __init__(self) -> None:
        pass

    async def load_all(self) -> LoadedSweeps:
        return LoadedSweeps()


async def test_a_job_running_on_a_cordoned_node_is_kept_by_a_restarted_scheduler() -> None:
    h = Harness(nodes=2)
    job = h.submit("job-1", 0)
    await h.running(job)
    assert job.state.nodes == ("n1",)
    h.backend.names.remove("n1")  # cordoned while the scheduler is down

    store = Reloading()
    store.records = h.store.records
    store.stored = [StoredJob(job.state, {}, job.manifest_text, job.source)]
    options: SchedulerOptions = h.scheduler.shared.options
    again = Scheduler(store, h.backend, options, clock=h.clock)
    again.shared.marks = MemoryMarks()
    again.loop.driver._store = NoSweeps()
    await again.loop.rebuild()
    assert again.shared.admission.record("job-1").stage is Stage.RUNNING

    h.scheduler = again
    for _ in range(5):
        await h.step(options.policy.ready_timeout_s)
    restored = again.shared.jobs["job-1"]
    assert (restored.state.stage, restored.state.nodes) == (Stage.RUNNING, ("n1",))
    assert h.backend.deployed.count("job-1") == 1 and h.backend.torn_down == []
    h.report(restored, Phase.COMPLETED)
    await h.step()
    assert restored.state.status is JobStatus.COMPLETED
