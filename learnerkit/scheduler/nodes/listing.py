"""`learnerkit scheduler nodes`: each node with its state and the jobs that hold room there, read from etcd.

The serving scheduler publishes each node's state as it reads the nodes (``<root>.nodes/states``: ready, cordoned,
not-ready or lost); the drain marks are read live, so a node drained a moment ago shows ``drained`` at once. The
jobs are those deployed or running, from their records (their reservation's nodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.nodes.marks import NodeMarks


class NodeState(StrEnum):
    READY = "ready"
    CORDONED = "cordoned"
    """Takes no new learner (Kubernetes: unschedulable); what runs there goes on."""
    NOT_READY = "not-ready"
    """Not Ready for less than the node-lost grace."""
    LOST = "lost"
    """Deleted, or not Ready past the grace: its jobs resume elsewhere."""
    DRAINED = "drained"
    """`scheduler drain`: its jobs are moved off; it takes no new learner until `undrain`."""
    UNKNOWN = "unknown"
    """Named by a job's record or a drain mark, but in no list the scheduler published."""


@dataclass(frozen=True)
class NodeJob:
    job_id: str
    tenant: str
    status: str


@dataclass(frozen=True)
class NodeRow:
    node: str
    state: NodeState
    jobs: tuple[NodeJob, ...] = ()

    def to_dict(self) -> dict[str, object]:
        jobs = [{"job_id": j.job_id, "tenant": j.tenant, "status": j.status} for j in self.jobs]
        return {"node": self.node, "state": self.state.value, "jobs": jobs}


def node_rows(published: Mapping[str, str], drained: Iterable[str], jobs: Iterable[JobState]) -> list[NodeRow]:
    """Every node published, drained or holding a job, by name. A lost node stays lost whether drained or not."""
    drained = frozenset(drained)
    held = holders(jobs)
    known = {state.value: state for state in NodeState}
    rows = []
    for name in sorted({*published, *drained, *held}):
        state = known.get(published.get(name, ""), NodeState.UNKNOWN)
        if name in drained and state is not NodeState.LOST:
            state = NodeState.DRAINED
        rows.append(NodeRow(name, state, held.get(name, ())))
    return rows


def holders(jobs: Iterable[JobState]) -> dict[str, tuple[NodeJob, ...]]:
    """Node name -> the jobs holding room there (deployed or running), by id."""
    held: dict[str, list[NodeJob]] = {}
    for job in jobs:
        if job.stage not in (Stage.DEPLOYED, Stage.RUNNING):
            continue
        for node in dict.fromkeys(job.nodes):
            held.setdefault(node, []).append(NodeJob(job.job_id, job.tenant, job.status.value))
    return {node: tuple(sorted(found, key=lambda j: j.job_id)) for node, found in held.items()}


async def list_nodes(settings: EtcdSettings) -> list[NodeRow]:
    """The nodes of the scheduler serving ``settings.root``, as :func:`node_rows` makes them."""
    etcd = await EtcdStore.connect(settings)
    try:
        store = JobStore(etcd, settings.root)
        marks = NodeMarks(store)
        return node_rows(await marks.states(), await marks.drained(), await store.states())
    finally:
        await etcd.close()
