"""Nodes that change while the scheduler runs: a node added is used at the next read of the nodes; a node no
longer listed (cordoned) keeps the jobs running there but takes no new learner, and is dropped once they end."""

from __future__ import annotations

import pytest

from controller_sidecar.status import Phase
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.jobs.state import JobStatus
from tests.unit.scheduler.core.test_preemption import Harness

pytestmark = pytest.mark.asyncio

NODES_INTERVAL_S = 10.0


async def test_a_node_added_is_used_once_the_nodes_are_read_again() -> None:
    h = Harness(nodes=1)
    first = h.submit("job-first", 0)
    await h.running(first)
    waiting = h.submit("job-waiting", 0)
    await h.step()
    assert waiting.state.stage is Stage.QUEUED
    h.backend.names.append("n2")
    await h.step(NODES_INTERVAL_S)
    assert waiting.state.stage is Stage.DEPLOYED and waiting.state.nodes == ("n2",)


async def test_a_cordoned_node_keeps_its_job_takes_no_new_one_and_goes_when_empty() -> None:
    h = Harness(nodes=2)
    running = h.submit("job-running", 0)
    await h.running(running)
    assert running.state.nodes == ("n1",)
    h.backend.names.remove("n1")  # cordoned: the backend lists it no more
    await h.step(NODES_INTERVAL_S)
    cluster = h.scheduler.shared.admission.cluster
    assert running.state.stage is Stage.RUNNING and cluster.free("n1").gpus == 0
    h.submit("job-new", 0)
    h.submit("job-second", 0)
    await h.step()
    placed = {t.state.job_id: t.state.nodes for t in h.scheduler.shared.jobs.values() if t.state.nodes}
    assert placed == {"job-running": ("n1",), "job-new": ("n2",)}  # job-second waits: n1 takes no new learner
    h.report(running, Phase.COMPLETED)
    await h.step()
    assert running.state.status is JobStatus.COMPLETED
    await h.step(NODES_INTERVAL_S)
    assert "n1" not in h.scheduler.shared.admission.cluster.nodes


async def test_nodes_that_cannot_be_read_keep_the_last_listing_and_the_step_goes_on() -> None:
    h = Harness(nodes=1)
    first = h.submit("job-first", 0)
    await h.running(first)

    def unreadable() -> list[Node]:
        raise BackendError("listing the cluster's nodes: 503 Service Unavailable")

    h.backend.nodes = unreadable  # type: ignore[method-assign]
    h.report(first, Phase.COMPLETED)
    await h.step(NODES_INTERVAL_S)
    assert first.state.status is JobStatus.COMPLETED
    assert list(h.scheduler.shared.admission.cluster.nodes) == ["n1"]
