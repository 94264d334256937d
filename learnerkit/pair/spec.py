"""What one learner pair is, whatever runs it: the learner and its controller sidecar, their images, the
learner's command and limits, and where the sidecar reaches etcd and S3.

``learnerkit sidecar run-local`` and the scheduler's Docker backend start a :class:`PairSpec` as two containers
sharing a volume (:mod:`learnerkit.pair.docker`); the Kubernetes backend as one pod.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller_sidecar.endpoints import Endpoints
from learnerkit.common.errors import ConfigError

S3_URL = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<key>.*))?$")
# The pod name `lk-<job>-<n>` must stay a DNS label (63 characters) for the headless Service's records.
JOB_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$")
SIDECAR_FILE = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
LEARNER_UID = 1000
SIDECAR_UID = 1001
"""Two users, one group (0, which owns ``/job``; its folders are group-writable): the learner cannot read the
sidecar's ``/proc/<pid>/environ`` (its S3 and etcd secrets) even where they share a PID namespace
(Kubernetes' ``shareProcessNamespace``), and each still reads what the other writes."""
SIDECAR_CPUS = 1.0
SIDECAR_MEMORY_BYTES = 1 << 30
"""The sidecar's limits on every backend, whatever the learner's size: it moves files, tails logs and matches
the manifest's metric rules, so a runaway (a rule, a leak) is held here instead of starving the learner."""
LEARNER_PIDS_LIMIT = 4096
"""The default cap on a learner's processes and threads (a fork bomb is held to it; data loaders of many workers
with many threads each stay well below)."""
SIDECAR_PIDS_LIMIT = 512
MIN_PIDS_LIMIT = 16
"""The default cap on the sidecar's processes and threads (its own, and pip's while it installs requirements)."""


@dataclass(frozen=True)
class PidsLimits:
    """How many processes and threads each container of a pair may hold at once: the engine's ``pids_limit``.
    Kubernetes has no per-container limit: there the kubelet's ``podPidsLimit`` caps each pod (docs/security.md)."""

    learner: int = LEARNER_PIDS_LIMIT
    sidecar: int = SIDECAR_PIDS_LIMIT

    def __post_init__(self) -> None:
        for role, limit in (("learner", self.learner), ("sidecar", self.sidecar)):
            if limit < MIN_PIDS_LIMIT:
                raise ConfigError(f"the {role}'s pids limit must be at least {MIN_PIDS_LIMIT}, got {limit}")


@dataclass(frozen=True)
class PairSpec:
    job_id: str
    learner_id: int
    """1-based."""
    learner_image: str
    sidecar_image: str
    command: tuple[str, ...] | str
    """An argv (the image's ``learner-run`` entrypoint stays), or one shell string (an FfDL manifest's
    ``command``) that ``learner-run`` runs from ``LEARNER_COMMAND``."""
    sidecar_config: Mapping[str, Any]
    """The sidecar's config document (locations, timing, evaluation metrics; the ``to_raw()`` of a
    :class:`~controller_sidecar.configdoc.SidecarConfigDocument`); no secrets."""
    endpoints: Endpoints
    num_learners: int = 1
    learner_env: Mapping[str, str] = field(default_factory=dict)
    """Extra variables for the learner (distributed training: MASTER_ADDR, RANK...)."""
    cpus: float | None = None
    memory_bytes: int | None = None
    gpus: int = 0
    gpu_type: str | None = None
    """A ``nvidia.com/gpu.product`` label value, e.g. ``NVIDIA-A100-SXM4-80GB``."""
    halt_grace_s: float = 30.0
    shutdown_deadline_s: float = 20.0
    namespace: str = "default"
    """The Kubernetes namespace; the Docker engine has none."""
    data_mount: str | None = None
    """A host folder mounted read-only at the learner's ``/job/data`` (an FfDL ``mount_volume`` store); the
    Docker engine only."""
    pids: PidsLimits = field(default_factory=PidsLimits)
    storage_bytes: int | None = None
    """The manifest's ``storage``: the most ``/job`` may hold. Kubernetes: the ``emptyDir``'s ``sizeLimit`` (the
    kubelet evicts a pod past it); the Docker engine: a volume of that size (:mod:`learnerkit.pair.jobdisk`)."""
    sidecar_mounts: Mapping[str, str] = field(default_factory=dict)
    """Host files and folders the sidecar sees read-only (container path -> host path); the Docker engine only."""
    sidecar_files: Mapping[str, str] = field(default_factory=dict)
    """Files the sidecar sees read-only (container path -> text), carried by the job itself where the host's files
    reach no node; Kubernetes only (the job's Secret)."""

    def __post_init__(self) -> None:
        if not JOB_ID.match(self.job_id):
            raise ConfigError(
                f"job id {self.job_id!r}: must be lowercase letters, digits and '-', at most 50 characters"
                " (it names containers, pods and DNS records)"
            )
        if not 1 <= self.learner_id <= self.num_learners:
            raise ConfigError(f"job {self.job_id}: learner id {self.learner_id} not in 1..{self.num_learners}")
        if self.gpus < 0:
            raise ConfigError(f"job {self.job_id}: gpus must not be negative, got {self.gpus}")
        if self.gpu_type and not self.gpus:
            raise ConfigError(f"job {self.job_id}: gpu_type {self.gpu_type!r} given but gpus is 0")
        if self.data_mount is not None and not self.data_mount.startswith("/"):
            raise ConfigError(f"job {self.job_id}: the data mount {self.data_mount!r} is not an absolute host path")
        for path in self.sidecar_files:
            if not SIDECAR_FILE.match(path):
                raise ConfigError(
                    f"job {self.job_id}: the sidecar file {path!r} is not an absolute path of letters, digits, "
                    "'.', '_', '-' and '/'"
                )

    @property
    def name(self) -> str:
        """The stem of every object of this pair, and the learner's DNS host name: ``lk-<job>-<learner>``."""
        return f"lk-{self.job_id}-{self.learner_id}"


def parse_s3_url(text: str, what: str) -> tuple[str, str]:
    """``s3://bucket/key/prefix`` into (bucket, key); the error names the option."""
    match = S3_URL.match(text)
    if not match:
        raise ConfigError(f"{what}: {text!r} is not an s3://BUCKET/PREFIX URL")
    return match["bucket"], match["key"] or ""
