"""A node lost while the scheduler runs: deleted, or not Ready past the grace, its jobs are torn down and resume
elsewhere from their last checkpoint, the attempt ending NODE_LOST with the reason; a cordoned node loses
nothing. Driven with the preemption tests' harness (fake clock, nodes n1 and n2 of 8 GPUs)."""

from __future__ import annotations

import pytest

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import NodeHealth
from learnerkit.scheduler.core.nodeloss import fence_holds
from learnerkit.scheduler.jobs.attempts import AttemptEnd, load_attempts
from tests.unit.scheduler.core.test_preemption import GpuNodes, Harness

pytestmark = pytest.mark.asyncio

NODES_INTERVAL_S = 10.0
GRACE_S = 60.0


async def running_on_n1(h: Harness) -> None:
    job = h.submit("job-1", 0, ", checkpoint_interval: 30")
    await h.running(job)
    assert job.state.nodes == ("n1",)


async def test_a_node_not_ready_past_the_grace_has_its_job_resumed_elsewhere_once_its_lease_is_gone() -> None:
    """A node NotReady may only be cut off, its learner still running: the job is fenced to its next attempt at
    once, and redeployed only once the old learner's lease is gone (before this, at once: two learners wrote)."""
    h = Harness(nodes=2)
    await running_on_n1(h)
    job = h.scheduler.shared.jobs["job-1"]
    h.backend.names.remove("n1")
    h.backend.health["n1"] = NodeHealth(not_ready_since=h.clock.wall())
    await h.step(NODES_INTERVAL_S)
    await h.step(GRACE_S / 2)
    assert job.state.stage is Stage.RUNNING and h.backend.torn_down == []  # within the grace
    assert "job-1" not in h.store.fences

    await h.step(GRACE_S)
    for _ in range(3):  # the old learner still holds its lease: fenced, not moved
        await h.step(NODES_INTERVAL_S)
        assert h.store.fences["job-1"] == 2
        assert (job.state.stage, job.state.nodes, h.backend.deployed.count("job-1")) == (Stage.RUNNING, ("n1",), 1)
        assert h.backend.torn_down == []

    h.store.leases_gone.add("job-1")  # its sidecar revoked it (fenced) or it expired
    await h.step(NODES_INTERVAL_S)
    await h.step()
    assert h.backend.torn_down == ["job-1"]
    assert (job.state.nodes, job.state.resume_from_attempt, h.backend.deployed.count("job-1")) == (("n2",), 1, 2)
    assert h.store.fences["job-1"] == 2, "the new attempt is the one the fence names"
    first = (await load_attempts(h.store, "job-1"))[0]
    assert first.ended_by is AttemptEnd.NODE_LOST and first.work_lost_s == 30.0
    assert (h.lost_seconds(AttemptEnd.NODE_LOST), h.lost_seconds(AttemptEnd.PREEMPTED)) == (30.0, 0.0)
    assert first.reason == "node n1 went NotReady (over the 60s grace); resumes from its last checkpoint"


def test_a_fenced_job_waits_only_while_an_old_lease_is_held_on_a_node_that_still_exists() -> None:
    health = {"n1": NodeHealth(not_ready_since=0.0), "n2": NodeHealth()}
    assert fence_holds(["n1"], health, {1})
    assert not fence_holds(["n1"], health, set()), "no lease left: the old attempt can no longer write"
    assert not fence_holds(["n3"], health, {1}), "its node deleted: nothing runs there"
    assert fence_holds(["n1", "n3"], health, {2}), "one of its nodes still exists"


async def test_a_deleted_node_has_its_job_resumed_elsewhere_at_once() -> None:
    """Deleted from the cluster: confirmed gone, so its learner's lease (held still) is not waited for."""
    h = Harness(nodes=2)
    await running_on_n1(h)
    job = h.scheduler.shared.jobs["job-1"]
    h.backend.names.remove("n1")
    del h.backend.health["n1"]
    await h.step(NODES_INTERVAL_S)
    await h.step()
    assert job.state.nodes == ("n2",) and h.backend.deployed.count("job-1") == 2
    first = (await load_attempts(h.store, "job-1"))[0]
    assert (first.ended_by, first.reason) == (
        AttemptEnd.NODE_LOST,
        "node n1 was deleted; resumes from its last checkpoint",
    )


async def test_a_cordoned_node_keeps_its_job() -> None:
    h = Harness(nodes=2)
    await running_on_n1(h)
    job = h.scheduler.shared.jobs["job-1"]
    h.backend.names.remove("n1")
    h.backend.health["n1"] = NodeHealth(cordoned=True)
    for _ in range(3):
        await h.step(GRACE_S)
    assert (job.state.stage, job.state.nodes) == (Stage.RUNNING, ("n1",)) and h.backend.torn_down == []


class PodsOutliveNodes(GpuNodes):
    """Kubernetes-like: a lost node's pods are deleted only by force (no kubelet there confirms a deletion)."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.pinned: list[tuple[str, ...]] = []
        """Each deployment's nodes, learner by learner."""

    def delete_lost_pods(self, job_id: str, nodes: frozenset[str]) -> None:
        self.events.append(f"delete {job_id}'s pods on {','.join(sorted(nodes))} at once")

    def deploy(self, job: JobDeployment) -> None:
        super().deploy(job)
        self.pinned.append(job.nodes)


async def test_a_lost_nodes_pods_are_deleted_at_once_before_the_teardown_and_the_redeploy() -> None:
    """Before this, the lost node's pod stayed Terminating for good and the redeploy of the same pod name waited
    120 s for it, then failed (issue 21, real-cluster tier)."""
    h = Harness(nodes=2)
    h.backend = h.scheduler.shared.backend = PodsOutliveNodes(2)
    await running_on_n1(h)
    h.backend.events.clear()
    h.backend.names.remove("n1")
    del h.backend.health["n1"]
    await h.step(NODES_INTERVAL_S)
    await h.step()
    assert h.backend.events == ["delete job-1's pods on n1 at once", "teardown job-1", "deploy job-1"]
    assert h.scheduler.shared.jobs["job-1"].state.nodes == ("n2",)
    assert h.backend.pinned == [("n1",), ("n2",)], "each attempt's learner pinned to the node it was admitted to"
