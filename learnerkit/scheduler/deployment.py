"""What a backend deploys: a job's learners, each a learner + sidecar pair, backend-neutral.

The service builds a :class:`JobDeployment` from a manifest; the Docker backend turns each learner into a
container pair, the Kubernetes backend into a pod with a native sidecar. Both give distributed learners
the same rendezvous names and variables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from learnerkit.common.errors import ConfigError

DEFAULT_MASTER_PORT = 29500

# The pod name `lk-<job>-<n>` must stay a DNS label (63 characters) for the headless Service's records.
JOB_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$")

Framework = Literal["tensorflow", "pytorch", "mxnet", "caffe", "generic"]


@dataclass(frozen=True)
class Secrets:
    """Where the sidecar reaches etcd and the object store, and with which credentials."""

    etcd_endpoints: str
    """Comma-separated ``host:port`` of the etcd members."""
    etcd_username: str | None = None
    etcd_password: str | None = field(default=None, repr=False)
    s3_endpoint_url: str | None = None
    s3_access_key: str | None = field(default=None, repr=False)
    s3_secret_key: str | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """The sidecar's variables (the names its settings read), unset values left out."""
        values = {
            "ETCD_ENDPOINTS": self.etcd_endpoints,
            "ETCD_USERNAME": self.etcd_username,
            "ETCD_PASSWORD": self.etcd_password,
            "S3_ENDPOINT_URL": self.s3_endpoint_url,
            "AWS_ACCESS_KEY_ID": self.s3_access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3_secret_key,
        }
        return {name: value for name, value in values.items() if value}


@dataclass(frozen=True)
class Egress:
    """A destination outside the cluster's pods that the job's pods may reach (etcd, S3)."""

    cidr: str
    port: int
    protocol: Literal["TCP", "UDP"] = "TCP"


@dataclass(frozen=True)
class LearnerDeployment:
    """One learner pod; mirrors ``learnerkit.pair.spec.PairSpec`` of the Docker backend."""

    job_id: str
    learner_id: int
    """1-based."""
    learner_image: str
    sidecar_image: str
    command: tuple[str, ...] | str
    """An argv (the container's ``args``: the image's ``learner-run`` entrypoint stays), or one shell
    string (an FfDL manifest's ``command``) that ``learner-run`` runs from ``LEARNER_COMMAND``."""
    sidecar_config: Mapping[str, Any]
    """The sidecar's config document (locations, timing, evaluation metrics); no secrets."""
    secrets: Secrets
    num_learners: int = 1
    learner_env: Mapping[str, str] = field(default_factory=dict)
    cpus: float | None = None
    memory_bytes: int | None = None
    gpus: int = 0
    gpu_type: str | None = None
    """A ``nvidia.com/gpu.product`` label value, e.g. ``NVIDIA-A100-SXM4-80GB``."""
    halt_grace_s: float = 30.0
    shutdown_deadline_s: float = 20.0
    namespace: str = "default"

    def __post_init__(self) -> None:
        if not JOB_ID.match(self.job_id):
            raise ConfigError(
                f"job id {self.job_id!r}: must be lowercase letters, digits and '-', at most 50 characters"
                " (it names pods and DNS records)"
            )
        if not 1 <= self.learner_id <= self.num_learners:
            raise ConfigError(f"job {self.job_id}: learner id {self.learner_id} not in 1..{self.num_learners}")
        if self.gpus < 0:
            raise ConfigError(f"job {self.job_id}: gpus must not be negative, got {self.gpus}")
        if self.gpu_type and not self.gpus:
            raise ConfigError(f"job {self.job_id}: gpu_type {self.gpu_type!r} given but gpus is 0")

    @property
    def name(self) -> str:
        """The pod's name and DNS host name: ``lk-<job>-<learner>``."""
        return f"lk-{self.job_id}-{self.learner_id}"


@dataclass(frozen=True)
class JobDeployment:
    """Every learner of one job, and how the learners find each other and the platform."""

    job_id: str
    learners: tuple[LearnerDeployment, ...]
    distributed: bool = False
    """True: learners talk to each other (headless Service, peer traffic, MASTER_ADDR...)."""
    framework: Framework = "generic"
    """Which distributed variables the learners get beside the generic ones."""
    master_port: int = DEFAULT_MASTER_PORT
    platform_egress: tuple[Egress, ...] = ()
    """etcd and S3 as CIDR and port: a NetworkPolicy selects addresses, not host names."""
    namespace: str = "default"

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
        if len({learner.secrets for learner in self.learners}) != 1:
            raise ConfigError(f"job {self.job_id}: learners must share one set of sidecar credentials")
        if self.distributed and len(self.learners) < 2:
            raise ConfigError(f"job {self.job_id}: a distributed job needs at least 2 learners")

    @property
    def name(self) -> str:
        """The stem of the job's shared objects (Service, NetworkPolicy): ``lk-<job>``."""
        return f"lk-{self.job_id}"

    @property
    def secret_name(self) -> str:
        return f"lk-{self.job_id}-sidecar"


def master_addr(job: JobDeployment) -> str:
    """Learner 1's stable DNS name through the headless Service (resolvable from the job's pods)."""
    return f"lk-{job.job_id}-1.{job.name}"


def distributed_env(job: JobDeployment, learner: LearnerDeployment) -> dict[str, str]:
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
