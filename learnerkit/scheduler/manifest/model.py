"""A job manifest as data: FfDL's `manifest.yml` plus learnerkit's `learnerkit:` section (docs/manifests.md).

:mod:`learnerkit.scheduler.manifest.parser` makes a :class:`JobManifest` from text and checks every field.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from learner.evaluation.spec import EvaluationSpec, spec_to_dict
from learnerkit.scheduler.manifest.catalogfield import CatalogSpec

FrameworkCatalog = Mapping[str, Collection[str]]
"""Framework name -> the version strings a manifest may give for it (`2.13`, `2.13-cpu`, a full tag)."""

CUSTOM_FRAMEWORK = "custom"
"""FfDL's escape hatch: `framework.version` is then the learner image itself (e.g. `tomcli/pytorch:latest`)."""

COPY_TYPES = ("s3_datastore", "mount_cos")
"""Data store types the sidecar downloads from and uploads to. FfDL mounted a `mount_cos` bucket with s3fs
(FUSE, privileged); here it is the same S3 bucket copied in before the command and out after it
(docs/migrating-from-ffdl.md)."""
MOUNT_TYPES = ("mount_volume",)
"""Data store types mounted into the learner: a host path (`mount_volume`), read-only, training data only."""
DATA_STORE_TYPES = COPY_TYPES + MOUNT_TYPES
CREDENTIAL_KEYS = ("user_name", "password")
"""Connection keys that hold credentials: kept out of the spec, handed to the sidecar's secret only."""
CONNECTION_KEYS: Mapping[str, tuple[str, ...]] = {
    "s3_datastore": ("type", "auth_url", "user_name", "password", "region"),
    "mount_cos": ("type", "auth_url", "user_name", "password", "region"),
    "mount_volume": ("type", "name", "path"),
}
REQUIRED_CONNECTION_KEYS: Mapping[str, tuple[str, ...]] = {
    "s3_datastore": ("auth_url", "user_name", "password"),
    "mount_cos": ("auth_url", "user_name", "password"),
    "mount_volume": ("path",),
}
HOST_MOUNT = "host_mount"


class DistributedMode(StrEnum):
    """How learners of one job find each other: which variables the scheduler sets (docs/architecture.md)."""

    NONE = "none"
    """JOB_ID, LEARNER_ID, NUM_LEARNERS only: the command wires itself up, as under FfDL."""
    DDP = "ddp"
    """PyTorch: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK."""
    TF = "tf"
    """TensorFlow: TF_CONFIG."""
    MXNET = "mxnet"
    """MXNet: DMLC_* (one scheduler and the servers alongside the learners)."""


DISTRIBUTED_FRAMEWORK: Mapping[DistributedMode, str] = {
    DistributedMode.DDP: "pytorch",
    DistributedMode.TF: "tensorflow",
    DistributedMode.MXNET: "mxnet",
}


@dataclass(frozen=True)
class ResourceDefaults:
    """What a manifest without `cpus`, `memory` or `training_results` gets: FfDL's trainer defaults
    (`setDefaultResourceRequirements`: 5 CPUs, 12 GiB) unless the scheduler's settings say otherwise, and the
    scheduler's results bucket where it has one (docs/manifests.md)."""

    cpus: float = 5.0
    memory_bytes: int = 12 * 2**30
    storage_bytes: int | None = None
    """What a manifest without `storage` gets (FfDL had none: its `/job` was bounded only by the node's disk)."""
    results_bucket: str | None = None
    """The bucket of the default results store (`manifest.defaultresults`); None: `training_results` is required."""


FFDL_DEFAULTS = ResourceDefaults()


@dataclass(frozen=True)
class Resources:
    """What each learner gets (FfDL's cpus, gpus and memory are per learner), and how many learners."""

    cpus: float
    memory_bytes: int
    gpus: int = 0
    learners: int = 1
    gpu_type: str | None = None
    """A node label value the learner's node must carry; only with gpus > 0."""
    storage_bytes: int | None = None
    """FfDL's `storage`: scratch space per learner, if the job asks for it."""
    defaulted: tuple[str, ...] = ()
    """The fields the manifest left out and got from `ResourceDefaults` (`cpus`, `memory`)."""


@dataclass(frozen=True)
class DataStore:
    """One object store (or host path) of the job; its credentials never show in `repr` or the spec."""

    id: str
    type: str
    training_data: str | None
    """The container (bucket) holding the training data."""
    training_results: str | None
    """The container (bucket) the results, logs and checkpoints go to."""
    connection: Mapping[str, str]
    """Connection settings without credentials: auth_url, region, type, or a host mount's path and name."""
    credentials: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    """user_name (access key) and password (secret key): for the sidecar's secret, nowhere else."""
    scheduler_default: bool = False
    """Added by the scheduler as the default results store (`manifest.defaultresults`), not in the manifest."""

    @property
    def mode(self) -> str:
        """`copy`: the sidecar downloads and uploads; `mount`: the learner reads and writes in place."""
        return "copy" if self.type in COPY_TYPES else "mount"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "mode": self.mode,
            "training_data": {"container": self.training_data} if self.training_data else None,
            "training_results": {"container": self.training_results} if self.training_results else None,
            "connection": dict(self.connection),
            "credential_keys": sorted(self.credentials),
            **({"scheduler_default": True} if self.scheduler_default else {}),
        }


@dataclass(frozen=True)
class Framework:
    name: str
    """As the manifest gives it (FfDL's names: `caffe2`, `horovod`, ...)."""
    version: str
    command: str
    """One shell command line, as FfDL ran it: every line break replaced by a space, then stripped."""
    image_tag: str | None = None
    """FfDL's optional learner image tag; kept as given."""
    runs_as: str = ""
    """The framework whose learnerkit image runs the job (`learnerkit.scheduler.manifest.ffdlnames`); empty: `name`."""

    @property
    def target(self) -> str:
        return self.runs_as or self.name


@dataclass(frozen=True)
class Extensions:
    """The `learnerkit:` section. FfDL ignores keys it does not know, so such a manifest still runs there."""

    image: str | None = None
    """Learner image to run instead of the framework's learnerkit image."""
    priority: int = 0
    """Higher runs first within a queue; -1000 to 1000."""
    tenant: str = "default"
    queue: str = "default"
    checkpoint_interval: int | None = None
    """Seconds between checkpoint uploads while the job runs; None uploads on halt and at the end only."""
    max_restarts: int = 0
    """How often a failed job is started again before it is FAILED."""
    auto_resume: bool = True
    """A restarted job resumes from its last uploaded checkpoint (else it starts over)."""
    preemptible: bool = True
    """False opts the job out of preemption, where its tenant's settings allow that (the tenants file)."""
    distributed: DistributedMode = DistributedMode.NONE
    halt_grace: int = 30
    """Seconds between the halt signal and SIGKILL."""
    training_data: str | None = None
    """Id of the data store to read training data from; default: the first that has `training_data`."""
    training_results: str | None = None
    """Id of the data store to write results to; default: the first that has `training_results`."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "priority": self.priority,
            "tenant": self.tenant,
            "queue": self.queue,
            "checkpoint_interval": self.checkpoint_interval,
            "max_restarts": self.max_restarts,
            "auto_resume": self.auto_resume,
            "preemptible": self.preemptible,
            "distributed": self.distributed.value,
            "halt_grace": self.halt_grace,
            "training_data": self.training_data,
            "training_results": self.training_results,
        }


@dataclass(frozen=True)
class JobManifest:
    name: str
    resources: Resources
    data_stores: tuple[DataStore, ...]
    framework: Framework
    description: str = ""
    version: str | None = None
    evaluation_metrics: Mapping[str, Any] | None = None
    """FfDL's evaluation_metrics, kept raw (plain JSON data): the sidecar's metric parser reads it."""
    extensions: Extensions = field(default_factory=Extensions)
    evaluations: tuple[EvaluationSpec, ...] = ()
    """The `evaluations:` section: run after the job completes (`manifest.evaluations`, docs/evaluations.md)."""
    catalog: CatalogSpec | None = None
    """The `catalog:` section: register the model once its evaluations pass (docs/catalog.md)."""

    @property
    def training_data_store(self) -> DataStore:
        """The store training data comes from (validated to exist when the manifest was parsed)."""
        wanted = self.extensions.training_data
        return next(s for s in self.data_stores if (s.id == wanted if wanted else s.training_data))

    @property
    def training_results_store(self) -> DataStore | None:
        wanted = self.extensions.training_results
        return next((s for s in self.data_stores if (s.id == wanted if wanted else s.training_results)), None)

    @property
    def image(self) -> str | None:
        """The image the job asked for by name, if any: `learnerkit.image`, or FfDL's custom framework."""
        if self.extensions.image:
            return self.extensions.image
        return self.framework.version if self.framework.name == CUSTOM_FRAMEWORK else None

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON data for etcd's `spec` key: no credentials (see `credentials`)."""
        r = self.resources
        return {
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "resources": {
                "cpus": r.cpus,
                "gpus": r.gpus,
                "gpu_type": r.gpu_type,
                "memory_bytes": r.memory_bytes,
                "storage_bytes": r.storage_bytes,
                "learners": r.learners,
                "defaulted": list(r.defaulted),
            },
            "data_stores": [store.to_dict() for store in self.data_stores],
            "framework": {
                "name": self.framework.name,
                "version": self.framework.version,
                "command": self.framework.command,
                "image_tag": self.framework.image_tag,
                "runs_as": self.framework.target,
            },
            "evaluation_metrics": _thaw(self.evaluation_metrics),
            "learnerkit": self.extensions.to_dict(),
            "evaluations": [spec_to_dict(spec) for spec in self.evaluations],
            "catalog": self.catalog.to_dict() if self.catalog else None,
        }

    def credentials(self) -> dict[str, dict[str, str]]:
        """Data store id -> its credentials, for the Secret only the sidecar mounts."""
        return {store.id: dict(store.credentials) for store in self.data_stores if store.credentials}

    def without_credentials(self) -> JobManifest:
        """The manifest of a job whose credentials were deleted (docs/security.md): no store has any."""
        empty: Mapping[str, str] = MappingProxyType({})
        return replace(self, data_stores=tuple(replace(store, credentials=empty) for store in self.data_stores))


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(item) for item in value]
    return value
