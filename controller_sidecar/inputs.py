"""DOWNLOADING: the training data, the model code archive and its requirements (or, for an evaluation, a trained
job's saved model), and, on resume, the latest checkpoint."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller_sidecar.archive import extract_archive
from controller_sidecar.checkpointsync import checkpoint_digest, restore_latest_checkpoint
from controller_sidecar.download import download_prefix
from controller_sidecar.errors import TransferError
from controller_sidecar.prom import SidecarMetrics
from controller_sidecar.provenancerecord import Digested, InstalledPackage
from controller_sidecar.requirements import install_requirements
from controller_sidecar.retry import Backoff, retry_async
from controller_sidecar.settings import S3Location, SidecarSettings

if TYPE_CHECKING:
    from controller_sidecar.s3store import S3Store

LOGGER = logging.getLogger(__name__)
MODEL_ARCHIVE = "model-archive"


@dataclass(frozen=True)
class InputsReady:
    data_files: int
    data_bytes: int
    model_bytes: int
    restored_step: int | None
    data: tuple[Digested, ...] = ()
    """Every training data object with the SHA-256 taken as it streamed in."""
    model: Digested | None = None
    """The model code archive, hashed as it streamed in."""
    packages: tuple[InstalledPackage, ...] = ()
    restored_checkpoint: str | None = None
    """The SHA-256 of the restored checkpoint's marker."""


def transfer_backoff(settings: SidecarSettings) -> Backoff:
    """A transfer's retries: a write held back by a lapsed lease is given up after ``timing.held_back_give_up_s``."""
    return Backoff(
        initial_s=0.2,
        maximum_s=10.0,
        max_attempts=settings.s3.max_attempts,
        held_back_s=settings.timing.held_back_give_up_s,
    )


async def fetch_inputs(settings: SidecarSettings, store: S3Store, metrics: SidecarMetrics) -> InputsReady:
    """Everything the learner needs before ``start``; each part resumes where a killed sidecar left it."""
    backoff = transfer_backoff(settings)
    dirs = settings.dirs
    files = data_bytes = 0
    data: tuple[Digested, ...] = ()
    if settings.locations.data is not None:
        stats = await asyncio.to_thread(
            download_prefix,
            store,
            settings.locations.data,
            dirs.data,
            state_file=dirs.control / "download-data.json",
            concurrency=settings.s3.max_concurrency,
            backoff=backoff,
            on_retry=lambda: metrics.record_retry("download"),
        )
        metrics.record_transfer("download", "data", stats.bytes, stats.seconds)
        files, data_bytes = stats.files, stats.bytes
        bucket = settings.locations.data.bucket
        sizes = {obj.key: obj.size for obj in stats.objects}
        data = tuple(Digested(f"s3://{bucket}/{key}", sha, sizes[key]) for key, sha in sorted(stats.digests.items()))
        LOGGER.info("data: %d files, %d bytes (%d already here)", stats.files, stats.bytes, stats.skipped)
    model_bytes = 0
    model: Digested | None = None
    packages: tuple[InstalledPackage, ...] = ()
    if settings.locations.model is not None:
        started = time.monotonic()
        model_bytes, model = await _fetch_model(settings, store, settings.locations.model, backoff)
        metrics.record_transfer("download", "model", model_bytes, time.monotonic() - started)
        if settings.requirements is not None:
            index = settings.requirements
            installed = await install_requirements(dirs.model, dirs.packages, index)
            packages = installed.packages
            LOGGER.info("requirements: %d installed into %s", installed.requested, dirs.packages)
    if settings.locations.trained_model is not None:
        stats = await asyncio.to_thread(
            download_prefix,
            store,
            settings.locations.trained_model,
            dirs.model,
            state_file=dirs.control / "download-trained-model.json",
            concurrency=settings.s3.max_concurrency,
            backoff=backoff,
            on_retry=lambda: metrics.record_retry("download"),
        )
        if stats.files + stats.skipped == 0:
            raise TransferError(f"trained model {settings.locations.trained_model} holds no files")
        metrics.record_transfer("download", "model", stats.bytes, stats.seconds)
        model_bytes = stats.bytes
        LOGGER.info("trained model: %d files, %d bytes", stats.files, stats.bytes)
    restored = None
    if settings.locations.resume_from is not None:
        restored = await asyncio.to_thread(
            restore_latest_checkpoint,
            store,
            settings.locations.resume_from,
            dirs.checkpoints,
            concurrency=settings.s3.max_concurrency,
            backoff=backoff,
        )
        LOGGER.info("resume: %s", f"checkpoint of step {restored} restored" if restored is not None else "none")
    digest = None
    if settings.locations.resume_from is not None and restored is not None:
        where = settings.locations.resume_from
        digest = await asyncio.to_thread(checkpoint_digest, store, where, restored, backoff=backoff)
    return InputsReady(files, data_bytes, model_bytes, restored, data, model, packages, digest)


async def _fetch_model(
    settings: SidecarSettings, store: S3Store, location: S3Location, backoff: Backoff
) -> tuple[int, Digested]:
    """The expanded size of the model code and the archive's digest."""
    listed = await retry_async(lambda: asyncio.to_thread(store.list, location), backoff, what=f"list {location}")
    matches = [obj for obj in listed if obj.key == location.prefix]
    if not matches:
        raise TransferError(f"model archive {location} does not exist")
    archive = settings.dirs.control / MODEL_ARCHIVE
    fetched = await retry_async(
        lambda: asyncio.to_thread(store.download_hashed, location.bucket, matches[0], archive),
        backoff,
        what=f"download {location}",
    )
    digested = Digested(f"s3://{location.bucket}/{location.prefix}", fetched.sha256, fetched.size)
    try:
        expanded = await asyncio.to_thread(
            extract_archive,
            archive,
            settings.dirs.model,
            max_bytes=settings.limits.max_archive_bytes,
            max_members=settings.limits.max_archive_members,
        )
    finally:
        archive.unlink(missing_ok=True)
    return expanded, digested
