"""What the scheduler asks of a backend (the Docker engine, Kubernetes). Every call blocks: the scheduler makes
them in worker threads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.backends.deployment import JobDeployment


@dataclass(frozen=True)
class SidecarStates:
    """What the backend shows of a job's sidecars, from one listing."""

    exited: dict[int, int] = field(default_factory=dict)
    """Learner id -> exit status of each sidecar that ended (a pod that failed counts as 1)."""
    running: frozenset[int] = frozenset()
    """Learner ids whose sidecar container (Docker) or pod (Kubernetes) exists and has not ended. A learner in
    neither set has no sidecar left at all: removed, or never made."""
    ended_by: dict[int, str] = field(default_factory=dict)
    """Learner id -> what the backend says ended an exited sidecar, where it says (Kubernetes: the failed pod's
    reason and message, ``Evicted: The node was low on resource: ephemeral-storage.``)."""
    log_tails: dict[int, str] = field(default_factory=dict)
    """Learner id -> the end of an exited sidecar's log, where the backend keeps it (Docker: the container's last
    lines; Kubernetes: the termination message, which falls back to the log's end on an error): a sidecar that
    dies before it can report says why there (a traceback's last line)."""
    restarts: dict[int, int] = field(default_factory=dict)
    """Learner id -> how many times the backend made its sidecar again (kept with the container, so a restarted
    scheduler goes on counting from there)."""


@dataclass(frozen=True)
class LearnerEnd:
    """How a learner container ended, as the runtime tells it."""

    exit_code: int
    oom_killed: bool = False
    """The runtime killed it for using more memory than its limit (Docker's ``OOMKilled``, the Kubernetes
    reason ``OOMKilled``)."""


@dataclass(frozen=True)
class NodeHealth:
    """A node as the cluster shows it, whether or not it takes learners (:meth:`Backend.nodes` lists only those
    that do)."""

    cordoned: bool = False
    not_ready_since: float | None = None
    """Epoch seconds since which the node has not been Ready (Kubernetes: its Ready condition's last transition);
    None while it is Ready."""


class Backend(Protocol):
    deploys_held: bool
    """Whether a queued preemptor's pairs may be deployed held while its victims checkpoint
    (:mod:`learnerkit.scheduler.core.holding`): on Docker yes; on Kubernetes no, a held pod would take its node's
    room in the kube-scheduler's eyes."""

    def nodes(self) -> list[Node]: ...
    def node_health(self) -> dict[str, NodeHealth]:
        """Every node the cluster has, by name: a node absent is deleted."""
        ...

    def deploy(self, job: JobDeployment) -> None: ...
    def started(self, job_id: str, learners: int) -> bool: ...
    def sidecars(self, job_id: str) -> SidecarStates: ...
    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]: ...
    def learners_running(self, job_id: str) -> set[int]:
        """Learner ids whose learner container (not its sidecar) runs now, as the runtime says."""
        ...

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        """Start the learner's ended sidecar again on its kept ``/job``; False where this backend cannot (then the
        learner is lost)."""
        ...

    def teardown(self, job_id: str) -> None: ...
    def job_ids(self, instance: str) -> set[str]: ...


@runtime_checkable
class ReportsImageDigest(Protocol):
    """A backend whose scheduler's engine is not the one that runs the learners (Kubernetes): it says which image
    digest the cluster ran, for the provenance."""

    def learner_image_digest(self, job_id: str) -> str:
        """``sha256:<hex>`` of the learner image the job's learners run; empty before one has started."""
        ...


@runtime_checkable
class DeletesLostPods(Protocol):
    """A backend whose objects outlive their node (Kubernetes: a pod is deleted only once its kubelet confirms it)."""

    def delete_lost_pods(self, job_id: str, nodes: frozenset[str]) -> None:
        """Delete the job's pods bound to ``nodes`` at once, with no grace: the scheduler declared those nodes lost,
        so no kubelet will ever confirm a graceful deletion, and the job's next attempt reuses the pods' names."""
        ...
