"""What a backend deploys: a job's learners, each a learner + sidecar pair, backend-neutral.

The scheduler builds a :class:`JobDeployment` from a manifest; the Docker backend turns each learner's
:class:`~learnerkit.pair.spec.PairSpec` into a container pair, the Kubernetes backend into a pod. Both give
distributed learners the same rendezvous names and variables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from learner.paths import SHARED_DIR
from learnerkit.common.errors import ConfigError
from learnerkit.pair.spec import PairSpec

DEFAULT_MASTER_PORT = 29500
DEFAULT_SHARED_SIZE = "10Gi"

Framework = Literal["tensorflow", "pytorch", "mxnet", "caffe", "generic"]


@dataclass(frozen=True)
class Egress:
    """A destination outside the cluster's pods that the job's pods may reach (etcd, S3)."""

    cidr: str
    port: int
    protocol: Literal["TCP", "UDP"] = "TCP"


@dataclass(frozen=True)
class JobDeployment:
    """Every learner of one job, and how the learners find each other and the platform."""

    job_id: str
    learners: tuple[PairSpec, ...]
    distributed: bool = False
    """True: learners talk to each other (headless Service, peer traffic, MASTER_ADDR...)."""
    framework: Framework = "generic"
    """Which distributed variables the learners get beside the generic ones."""
    master_port: int = DEFAULT_MASTER_PORT
    platform_egress: tuple[Egress, ...] = ()
    """etcd and S3 as CIDR and port: a NetworkPolicy selects addresses, not host names."""
    namespace: str = "default"
    instance: str = ""
    """The scheduler instance that deploys the job: its label marks what this instance may sweep as orphans."""
    shared_storage_class: str | None = None
    """Kubernetes: the StorageClass of a multi-learner job's ReadWriteMany claim
    (``$LEARNERKIT_K8S_SHARED_STORAGE_CLASS``); None: the cluster's default class."""
    shared_size: str = DEFAULT_SHARED_SIZE
    """Kubernetes: the size that claim asks for (``$LEARNERKIT_K8S_SHARED_SIZE``)."""
    nodes: tuple[str, ...] = ()
    """The node the scheduler admitted each learner to, in learner order (empty: any). Kubernetes pins each pod
    there, so the node the scheduler accounts for (and moves the job off when it is lost) is where it runs."""

    def __post_init__(self) -> None:
        if not self.learners:
            raise ConfigError(f"job {self.job_id}: no learners")
        ids = sorted(learner.learner_id for learner in self.learners)
        if ids != list(range(1, len(self.learners) + 1)):
            raise ConfigError(f"job {self.job_id}: learner ids must be 1..{len(self.learners)}, got {ids}")
        for learner in self.learners:
            if (learner.job_id, learner.namespace, learner.num_learners) != (
                self.job_id,
                self.namespace,
                len(self.learners),
            ):
                raise ConfigError(f"job {self.job_id}: learner {learner.name} disagrees on job, namespace or count")
        if len({(learner.endpoints, _files(learner)) for learner in self.learners}) != 1:
            raise ConfigError(f"job {self.job_id}: learners must share one set of sidecar credentials and files")
        if self.distributed and len(self.learners) < 2:
            raise ConfigError(f"job {self.job_id}: a distributed job needs at least 2 learners")
        if self.nodes and len(self.nodes) != len(self.learners):
            raise ConfigError(f"job {self.job_id}: {len(self.nodes)} nodes for {len(self.learners)} learners")

    @property
    def name(self) -> str:
        """The stem of the job's shared objects (Service, NetworkPolicy): ``lk-<job>``."""
        return f"lk-{self.job_id}"

    @property
    def secret_name(self) -> str:
        return f"lk-{self.job_id}-sidecar"

    @property
    def shared_name(self) -> str:
        """The job folder's Docker volume or Kubernetes claim: ``lk-<job>-shared``."""
        return f"lk-{self.job_id}-shared"

    @property
    def networked(self) -> bool:
        """Learners reach each other by name (FfDL made a headless Service for every job of 2+ learners)."""
        return len(self.learners) > 1


def _files(learner: PairSpec) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(learner.sidecar_files.items()))


def ffdl_env(job_id: str, learner_id: int, num_learners: int) -> dict[str, str]:
    """FfDL's learner variables (lcm `envvars.go`), beside JOB_ID, LEARNER_ID and NUM_LEARNERS.

    The stem names learner ``n``'s host ``${LEARNER_NAME_PREFIX}-n`` (1-based, as ``LEARNER_ID``); FfDL's pod
    ordinals were 0-based (docs/migrating-from-ffdl.md).
    """
    stem = f"lk-{job_id}"
    return {
        "TRAINING_ID": job_id,
        "DLAAS_JOB_ID": job_id,
        "LEARNER_NAME_PREFIX": stem,
        "DOWNWARD_API_POD_NAME": f"{stem}-{learner_id}",
        "JOB_SHARED_DIR": SHARED_DIR,
        "NUM_LEARNERS": str(num_learners),
    }


def master_addr(job: JobDeployment) -> str:
    """Learner 1's stable DNS name through the headless Service (resolvable from the job's pods)."""
    return f"lk-{job.job_id}-1.{job.name}"


def distributed_env(job: JobDeployment, learner: PairSpec) -> dict[str, str]:
    """The rendezvous variables of one learner; empty for a job that is not distributed."""
    if not job.distributed:
        return {}
    rank = learner.learner_id - 1
    count = len(job.learners)
    port = str(job.master_port)
    env = {
        "MASTER_ADDR": master_addr(job),
        "MASTER_PORT": port,
        "WORLD_SIZE": str(count),
        "RANK": str(rank),
    }
    if job.framework == "tensorflow":
        workers = [f"lk-{job.job_id}-{n}.{job.name}:{port}" for n in range(1, count + 1)]
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}, sort_keys=True
        )
    elif job.framework == "mxnet":
        # Learner 1 hosts the parameter-server scheduler; each learner runs one server and one worker.
        env.update(
            {
                "DMLC_PS_ROOT_URI": master_addr(job),
                "DMLC_PS_ROOT_PORT": port,
                "DMLC_NUM_WORKER": str(count),
                "DMLC_NUM_SERVER": str(count),
                "DMLC_ROLE": "worker",
                "DMLC_WORKER_ID": str(rank),
            }
        )
    return env
