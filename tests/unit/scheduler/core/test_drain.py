"""A drained node in the control loop: its jobs halt through the usual path, requeue with their attempt ending
DRAINED and resume by themselves on another node; it takes no new learner until undrained; the marks outlive a
restart, and a drain names only a node the scheduler knows.

Driven step by step with the preemption tests' harness (fake clock, in-memory store, nodes of 8 GPUs); the drain
marks are the real :class:`NodeMarks` over a dictionary."""

from __future__ import annotations

import pytest

from controller_sidecar.status import ErrorCode, Phase
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.draining import resume_drains
from learnerkit.scheduler.errors import UnknownNodeError
from learnerkit.scheduler.jobs.attempts import AttemptEnd, load_attempts
from learnerkit.scheduler.jobs.state import JobStatus
from tests.unit.scheduler.core.test_preemption import TENANT, Harness

pytestmark = pytest.mark.asyncio

NODES_INTERVAL_S = 10.0


async def test_a_drained_nodes_job_halts_and_resumes_elsewhere_from_its_checkpoint() -> None:
    h = Harness(nodes=2)
    job = h.submit("job-1", 0)
    await h.running(job)
    assert job.state.nodes == ("n1",)

    await h.scheduler.shared.marks.drain("n1")
    await h.step(NODES_INTERVAL_S)
    assert h.store.halts == ["job-1"] and job.state.drained_from == "n1"
    assert job.state.reason == "node n1 is drained: halting to move elsewhere"
    await h.step()
    assert h.store.halts == ["job-1"]  # asked once

    h.report(job, Phase.HALTED)
    await h.step()
    assert (job.state.stage, job.state.nodes, job.state.resume_from_attempt) == (Stage.DEPLOYED, ("n2",), 1)
    assert job.state.drained_from is None and h.backend.deployed.count("job-1") == 2
    first, second = await load_attempts(h.store, "job-1")
    assert (first.ended_by, first.reason, first.work_lost_s) == (AttemptEnd.DRAINED, "node n1 drained", 0.0)
    assert (second.nodes, second.resumed_from, second.ended_by) == (("n2",), 1, None)


async def test_a_drained_node_takes_no_new_learner_until_undrained() -> None:
    """One node, as on the Docker backend: its job is halted and waits in the queue until the node comes back."""
    h = Harness(nodes=1)
    job = h.submit("job-1", 0)
    await h.running(job)
    marks = h.scheduler.shared.marks
    await marks.drain("n1")
    await h.step(NODES_INTERVAL_S)
    h.report(job, Phase.HALTED)
    await h.step()
    assert (job.state.status, job.state.stage) == (JobStatus.QUEUED, Stage.QUEUED)
    new = h.submit("job-new", 0)
    await h.step()
    assert job.state.stage is Stage.QUEUED and new.state.stage is Stage.QUEUED

    change = await marks.undrain("n1")
    assert change.changed
    await h.step(NODES_INTERVAL_S)
    assert job.state.stage is Stage.DEPLOYED and job.state.nodes == ("n1",)


async def test_a_learner_that_ignores_the_drains_halt_loses_at_most_a_checkpoint_interval() -> None:
    h = Harness(nodes=2)
    job = h.submit("job-1", 0, ", checkpoint_interval: 300")
    await h.running(job)
    await h.scheduler.shared.marks.drain("n1")
    await h.step(NODES_INTERVAL_S)
    h.report(job, Phase.HALTED, ErrorCode.HALT_TIMEOUT)
    await h.step()
    first = (await load_attempts(h.store, "job-1"))[0]
    assert first.ended_by is AttemptEnd.DRAINED and first.work_lost_s == 300.0
    assert h.lost_seconds(AttemptEnd.DRAINED) == 300.0
    assert first.reason.startswith("node n1 drained: killed after the")


async def test_a_users_halt_during_a_drain_wins() -> None:
    h = Harness(nodes=2)
    job = h.submit("job-1", 0)
    await h.running(job)
    await h.scheduler.shared.marks.drain("n1")
    await h.step(NODES_INTERVAL_S)
    await h.scheduler.halt(TENANT, "job-1")
    h.report(job, Phase.HALTED)
    await h.step()
    assert (job.state.status, job.state.stage) == (JobStatus.HALTED, Stage.DONE)
    assert (await load_attempts(h.store, "job-1"))[0].ended_by is AttemptEnd.HALTED


async def test_a_drain_of_an_unknown_node_names_it_and_the_known_ones() -> None:
    h = Harness(nodes=2)
    marks = h.scheduler.shared.marks
    with pytest.raises(UnknownNodeError, match="no scheduler has served"):
        await marks.drain("n1")
    await h.step()  # the loop publishes the nodes it reads
    with pytest.raises(UnknownNodeError, match=r"no node 'n9' .*the known nodes: n1, n2"):
        await marks.drain("n9")
    with pytest.raises(UnknownNodeError, match="no node 'n9'"):
        await marks.undrain("n9")
    assert await marks.drained() == frozenset()
    assert (await marks.drain("n2")).changed and not (await marks.drain("n2")).changed


async def test_a_restarted_scheduler_asks_the_halts_of_a_drain_under_way_again() -> None:
    h = Harness(nodes=2)
    job = h.submit("job-1", 0)
    await h.running(job)
    await h.scheduler.shared.marks.drain("n1")
    await h.step(NODES_INTERVAL_S)
    h.store.halts.clear()  # as if the scheduler stopped before asking
    await resume_drains(h.scheduler.shared)
    assert h.store.halts == ["job-1"]
    h.report(job, Phase.HALTED)
    await h.step()
    h.store.halts.clear()
    await resume_drains(h.scheduler.shared)
    assert h.store.halts == [] and job.state.nodes == ("n2",)
