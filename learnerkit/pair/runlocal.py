"""``learnerkit sidecar run-local``: one learner pair by hand, for development, followed to its end."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller_sidecar.configdoc import SidecarConfigDocument, StoreFolder, StoreObject, TimingDocument
from controller_sidecar.endpoints import Endpoints
from controller_sidecar.status import StatusRecord
from learnerkit.pair.docker import PairHandle, remove_pair, start_pair
from learnerkit.pair.etcd import etcd_settings, learner_metrics, learner_status
from learnerkit.pair.follow import stream_sidecar, wait_pair
from learnerkit.pair.spec import PairSpec, parse_s3_url

LOG_SHIP_INTERVAL_S = 2.0
"""Shorter than the sidecar's default: a pair run by hand is watched as it runs."""


def new_job_id() -> str:
    return f"local-{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class LocalRun:
    learner_image: str
    sidecar_image: str
    command: tuple[str, ...] | str
    results: str
    """``s3://bucket/prefix``: the pair's outputs go under ``<prefix><job_id>/learner-1/``."""
    endpoints: Endpoints
    data: str | None = None
    """``s3://bucket/prefix`` to download; None with ``data_mount`` or for jobs without data."""
    model: str | None = None
    """``s3://bucket/key`` of a model code zip."""
    resume_from: str | None = None
    """``s3://bucket/prefix`` of an earlier run's ``checkpoints/``."""
    job_id: str = field(default_factory=new_job_id)
    halt_grace_s: float = 30.0
    checkpoint_interval_s: float = 300.0
    memory_bytes: int | None = None
    cpus: float | None = None
    storage_bytes: int | None = None
    """The most ``/job`` may hold (a sized volume, as for a manifest's ``storage``); None: unbounded."""
    gpus: int = 0
    """NVIDIA GPUs for the learner, handed over as the Docker backend does (a device request per pair)."""
    evaluation_metrics: Mapping[str, Any] | None = None
    metrics_port: int = 0
    keep: bool = False
    """Keep the containers and the volume afterwards, for a post-mortem."""


@dataclass(frozen=True)
class LocalResult:
    job_id: str
    status: StatusRecord | None
    metrics: dict[str, object]
    sidecar_exit: int | None
    learner_exit: int | None
    outputs: str


def sidecar_config(run: LocalRun) -> tuple[SidecarConfigDocument, str]:
    """The sidecar's config document and the ``s3://`` URL of the pair's outputs."""
    bucket, prefix = parse_s3_url(run.results, "--results")
    prefix = f"{prefix.rstrip('/')}/" if prefix else ""
    outputs = f"{prefix}{run.job_id}/learner-1/"
    document = SidecarConfigDocument(
        results=StoreFolder(bucket, outputs),
        data=StoreFolder(*parse_s3_url(run.data, "--data")) if run.data else None,
        model=StoreObject(*parse_s3_url(run.model, "--model")) if run.model else None,
        resume_from=StoreFolder(*parse_s3_url(run.resume_from, "--resume-from")) if run.resume_from else None,
        timing=TimingDocument(
            halt_grace_s=run.halt_grace_s,
            checkpoint_interval_s=run.checkpoint_interval_s,
            log_ship_interval_s=LOG_SHIP_INTERVAL_S,
        ),
        evaluation_metrics=run.evaluation_metrics or None,
        metrics_port=run.metrics_port,
    )
    return document, f"s3://{bucket}/{outputs}"


def pair_spec(run: LocalRun) -> PairSpec:
    config, _ = sidecar_config(run)
    return PairSpec(
        job_id=run.job_id,
        learner_id=1,
        learner_image=run.learner_image,
        sidecar_image=run.sidecar_image,
        command=run.command,
        sidecar_config=config.to_raw(),
        endpoints=run.endpoints,
        memory_bytes=run.memory_bytes,
        cpus=run.cpus,
        gpus=run.gpus,
        halt_grace_s=run.halt_grace_s,
        storage_bytes=run.storage_bytes,
    )


def run_local(
    run: LocalRun,
    on_line: Callable[[str], None],
    on_started: Callable[[PairHandle], None] | None = None,
    wait: Callable[[PairHandle], object] | None = None,
) -> LocalResult:
    """Start the pair, stream its output, wait for its end, read the final status, clean up.

    ``wait`` replaces the plain wait for the sidecar (the CLI passes one that turns Ctrl-C into a halt).
    """
    handle = start_pair(pair_spec(run))
    try:
        if on_started is not None:
            on_started(handle)
        follower = stream_sidecar(handle, on_line)
        if wait is not None:
            wait(handle)
        end = wait_pair(handle)
        follower.join(timeout=10)
        settings = etcd_settings(run.endpoints.etcd_endpoints)
        status = learner_status(settings, run.job_id, 1)
        metrics = learner_metrics(settings, run.job_id, 1)
    finally:
        if not run.keep:
            remove_pair(handle)
    _, outputs = sidecar_config(run)
    return LocalResult(run.job_id, status, metrics, end.sidecar_exit, end.learner_exit, outputs)
