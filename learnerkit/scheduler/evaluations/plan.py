"""One evaluation's learner + sidecar pair: the evaluator image, the spec in ``EVALUATION_SPEC``, the trained
model and the evaluation data in, the report out to the job's results.

The evaluator gets no credentials (the sidecar holds them) and, as a pair of one learner, no network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from controller_sidecar.configdoc import SidecarConfigDocument, StoreFolder
from controller_sidecar.endpoints import Endpoints
from learner.evaluation.spec import EvaluationSpec, spec_to_dict
from learnerkit.common.errors import ConfigError
from learnerkit.pair.spec import PairSpec
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.jobs.layout import job_location, outputs_prefix, split_container
from learnerkit.scheduler.manifest.kinds import EvaluatorKinds, installed_kinds
from learnerkit.scheduler.manifest.model import JobManifest

CPUS = 1.0
MEMORY_BYTES = 2 * 1024**3
SHUTDOWN_DEADLINE_S = 20.0


class SidecarPlatform(Protocol):
    """What the evaluation's sidecar needs from the platform (the scheduler's ``Platform``)."""

    @property
    def sidecar_image(self) -> str: ...
    @property
    def metrics_port(self) -> int: ...
    @property
    def etcd_root(self) -> str: ...


@dataclass(frozen=True)
class EvaluatedJob:
    """The trained job an evaluation reads: its manifest and its results store's account."""

    job_id: str
    manifest: JobManifest
    endpoints: Endpoints
    manifest_text: str
    """The manifest as submitted: its credentials are kept in etcd while evaluations run (docs/security.md)."""
    source: str


def pair_id(job_id: str, round_: int, index: int) -> str:
    """The pair's id on the backend and in etcd: one per job, round and evaluation, so a redo replaces it."""
    return f"{job_id}-ev{round_}-{index + 1}"


def results_folder(job: EvaluatedJob, round_: int, name: str) -> tuple[str, str]:
    """Where the evaluation's outputs go: beside the job's attempts, ``evaluations/round-<r>/<name>/``."""
    bucket, prefix = job_location(job.manifest, job.job_id)
    return bucket, f"{prefix}evaluations/round-{round_}/{name}/"


def report_key(job: EvaluatedJob, round_: int, name: str) -> tuple[str, str]:
    bucket, prefix = results_folder(job, round_, name)
    return bucket, f"{prefix}results/evaluations/{name}.json"


def _data_folder(manifest: JobManifest, spec: EvaluationSpec) -> StoreFolder:
    wanted = spec.data.store
    store = next((s for s in manifest.data_stores if s.id == wanted), None) if wanted else manifest.training_data_store
    if store is None:
        raise ConfigError(f"evaluation {spec.name}: data.store {wanted!r} is not one of the job's data_stores")
    if store.mode != "copy":
        raise ConfigError(f"evaluation {spec.name}: its data store {store.id} is not an object store")
    results = manifest.training_results_store
    if results is not None and store.connection.get("auth_url") != results.connection.get("auth_url"):
        raise ConfigError(
            f"evaluation {spec.name}: its data store {store.id} is not the results store's endpoint "
            "(the sidecar holds one account)"
        )
    container = spec.data.container or store.training_data
    if not container:
        raise ConfigError(f"evaluation {spec.name}: data.container is not given and store {store.id} has none")
    return StoreFolder(*split_container(container))


def plan_evaluation(
    job: EvaluatedJob,
    round_: int,
    attempt: int,
    index: int,
    spec: EvaluationSpec,
    image: str,
    platform: SidecarPlatform,
    instance: str,
    kinds: EvaluatorKinds | None = None,
) -> JobDeployment:
    """The pair, running the command the evaluation's kind declares (``kinds`` None: the installed evaluators');
    ``ConfigError`` when the evaluation data cannot be served or no evaluator declares the kind."""
    declared = (kinds if kinds is not None else installed_kinds()).get(spec.kind)
    if declared is None:
        raise ConfigError(f"evaluation {spec.name}: no installed evaluator declares the kind {spec.kind}")
    model_bucket, learner_prefix = outputs_prefix(job.manifest, job.job_id, attempt, 1)
    config = SidecarConfigDocument(
        results=StoreFolder(*results_folder(job, round_, spec.name)),
        data=_data_folder(job.manifest, spec),
        trained_model=StoreFolder(model_bucket, f"{learner_prefix}results/model/"),
        metrics_port=platform.metrics_port,
        etcd_root=platform.etcd_root,
    )
    identity = pair_id(job.job_id, round_, index)
    pair = PairSpec(
        job_id=identity,
        learner_id=1,
        learner_image=image,
        sidecar_image=platform.sidecar_image,
        command=declared.command,
        sidecar_config=config.to_raw(),
        endpoints=job.endpoints,
        learner_env={"EVALUATION_SPEC": json.dumps(spec_to_dict(spec), sort_keys=True)},
        cpus=CPUS,
        memory_bytes=MEMORY_BYTES,
        shutdown_deadline_s=SHUTDOWN_DEADLINE_S,
    )
    return JobDeployment(job_id=identity, learners=(pair,), instance=instance)
