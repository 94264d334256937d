"""From a manifest to what a backend deploys: images, the sidecar's config and secret, per learner.

Where a job's objects lie in S3 is :mod:`learnerkit.scheduler.jobs.layout`; an attempt that resumes restores the
latest checkpoint of the attempt it resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import get_args

from controller_sidecar import keys
from controller_sidecar.configdoc import SidecarConfigDocument, StoreFolder, StoreObject, TimingDocument
from controller_sidecar.endpoints import Endpoints
from controller_sidecar.requirements import PackageIndex
from learner.paths import PACKAGES_DIR
from learnerkit.pair.spec import PairSpec, PidsLimits
from learnerkit.scheduler.backends.deployment import Framework, JobDeployment, ffdl_env
from learnerkit.scheduler.jobs.layout import outputs_prefix, results_store, split_container
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.model import DistributedMode, JobManifest

ImageResolver = Callable[[JobManifest], str]
"""The learner image of a manifest's framework and version (and GPU or CPU variant)."""

SHUTDOWN_DEADLINE_S = 20.0


@dataclass(frozen=True)
class Platform:
    """What every job's sidecars need from the platform, beside what the manifest says."""

    etcd_endpoints: str
    sidecar_image: str
    metrics_port: int = 0
    """The sidecars' Prometheus port; 0 on the Docker backend, whose sidecars share the host network."""
    etcd_root: str = keys.ROOT
    """The prefix of every job's keys (``$LEARNERKIT_ETCD_ROOT``): the sidecars report under the same one."""
    sidecar_mounts: Mapping[str, str] = field(default_factory=dict)
    """Files and folders of the host mounted read-only into every sidecar (container path -> host path): the
    package index's CA bundle and find-links folders (:mod:`learnerkit.scheduler.config.packageindex`); Docker.
    """
    sidecar_files: Mapping[str, str] = field(default_factory=dict)
    """Files every sidecar sees read-only (container path -> text), carried by each job: the package index's CA
    bundle on Kubernetes, whose nodes do not see the scheduler's host."""


def endpoints_for(manifest: JobManifest, platform: Platform) -> Endpoints:
    """The sidecar's credentials: the results store's, which must also serve the training data."""
    store = results_store(manifest)
    return Endpoints(
        etcd_endpoints=platform.etcd_endpoints,
        s3_endpoint_url=store.connection.get("auth_url"),
        s3_access_key=store.credentials.get("user_name"),
        s3_secret_key=store.credentials.get("password"),
    )


def sidecar_config(
    manifest: JobManifest,
    state: JobState,
    learner_id: int,
    platform: Platform,
    options: SubmitOptions | None = None,
    packages: PackageIndex | None = None,
    *,
    held: bool = False,
) -> SidecarConfigDocument:
    bucket, prefix = outputs_prefix(manifest, state.job_id, state.attempt, learner_id)
    data = manifest.training_data_store
    checkpoint_interval = manifest.extensions.checkpoint_interval
    model = options.model if options is not None else None
    resume_from = None
    if state.resume_from_attempt is not None:
        _, earlier = outputs_prefix(manifest, state.job_id, state.resume_from_attempt, learner_id)
        resume_from = StoreFolder(bucket, f"{earlier}checkpoints/")
    return SidecarConfigDocument(
        results=StoreFolder(bucket, prefix),
        data=StoreFolder(*split_container(data.training_data)) if data.mode == "copy" and data.training_data else None,
        model=StoreObject(model.bucket, model.key) if model is not None else None,
        resume_from=resume_from,
        timing=TimingDocument(
            halt_grace_s=float(manifest.extensions.halt_grace),
            checkpoint_interval_s=float(checkpoint_interval) if checkpoint_interval else None,
        ),
        evaluation_metrics=manifest.evaluation_metrics or None,
        requirements=(packages or PackageIndex()) if model is not None and model.requirements else None,
        metrics_port=platform.metrics_port,
        status_sequence_start=state.first_sequence,
        etcd_root=platform.etcd_root,
        held_attempt=state.attempt if held else None,
    )


def plan_job(
    manifest: JobManifest,
    state: JobState,
    platform: Platform,
    image: str,
    data_mount: str | None = None,
    options: SubmitOptions | None = None,
    packages: PackageIndex | None = None,
    pids: PidsLimits | None = None,
    trial_env: Mapping[str, str] | None = None,
    *,
    held: bool = False,
) -> JobDeployment:
    """The job's deployment; ``data_mount``: the host folder of a ``mount_volume`` training data store;
    ``options``: the submit's model code; ``packages``: where its requirements come from; ``pids``: the pairs'
    pids limits; ``trial_env``: a sweep trial's parameters and budget, as learner variables; ``held``: its
    learners wait for the release of this attempt (:mod:`learnerkit.scheduler.core.holding`)."""
    resources = manifest.resources
    endpoints = endpoints_for(manifest, platform)
    model = options.model if options is not None else None
    learner_env = {"PYTHONPATH": PACKAGES_DIR} if model is not None and model.requirements else {}
    learners = tuple(
        PairSpec(
            job_id=state.job_id,
            learner_id=n,
            learner_image=image,
            sidecar_image=platform.sidecar_image,
            command=manifest.framework.command,
            sidecar_config=sidecar_config(manifest, state, n, platform, options, packages, held=held).to_raw(),
            endpoints=endpoints,
            learner_env={**(trial_env or {}), **ffdl_env(state.job_id, n, resources.learners), **learner_env},
            num_learners=resources.learners,
            cpus=resources.cpus,
            memory_bytes=resources.memory_bytes,
            gpus=resources.gpus,
            gpu_type=resources.gpu_type,
            halt_grace_s=float(manifest.extensions.halt_grace),
            shutdown_deadline_s=SHUTDOWN_DEADLINE_S,
            data_mount=data_mount,
            pids=pids or PidsLimits(),
            storage_bytes=resources.storage_bytes,
            sidecar_mounts=platform.sidecar_mounts,
            sidecar_files=platform.sidecar_files,
        )
        for n in range(1, resources.learners + 1)
    )
    name = manifest.framework.target
    framework: Framework = name if name in get_args(Framework) else "generic"  # type: ignore[assignment]
    return JobDeployment(
        job_id=state.job_id,
        learners=learners,
        distributed=manifest.extensions.distributed is not DistributedMode.NONE and resources.learners > 1,
        framework=framework,
    )
