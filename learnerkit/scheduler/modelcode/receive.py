"""Receiving a submit's model code: stored into the job's results store as it arrives, and checked as it is."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from controller_sidecar.errors import SidecarError
from controller_sidecar.s3store import S3Store
from learnerkit.scheduler.errors import StoreUnavailableError
from learnerkit.scheduler.jobs.layout import model_location
from learnerkit.scheduler.jobs.submission import ModelObject
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.modelcode.archive import (
    DEFAULT_MAX_DIRECTORY_BYTES,
    DEFAULT_MAX_EXPANDED_BYTES,
    DEFAULT_MAX_MEMBERS,
    ModelSummary,
    check_model_archive,
)
from learnerkit.scheduler.modelcode.upload import StreamedUpload
from learnerkit.scheduler.modelcode.zipwindow import ZipWindow

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelLimits:
    """What a model archive may expand to (the sidecars' own limits)."""

    max_expanded_bytes: int = DEFAULT_MAX_EXPANDED_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS
    max_directory_bytes: int = DEFAULT_MAX_DIRECTORY_BYTES
    locked: Mapping[str, str] = field(default_factory=dict)
    """The learner image's locked packages, which the requirements may not replace."""


async def receive_model(
    store: S3Store, manifest: JobManifest, job_id: str, limits: ModelLimits, model: AsyncIterator[bytes]
) -> ModelObject:
    """Store the model as it arrives, keeping what the archive check reads of it, then check it: a refused
    one is dropped, and the object exists only when every check has passed."""
    bucket, key = model_location(manifest, job_id)
    upload = StreamedUpload(store, bucket, key)
    window = ZipWindow(limits.max_directory_bytes)
    stored = False
    try:
        async for chunk in model:
            window.feed(chunk)
            await upload.write(chunk)
        check = asyncio.to_thread(_check_streamed, window, limits)
        summary, _ = await asyncio.gather(check, upload.sent())  # the check while the last parts go
        await upload.finish()
        stored = True
    except SidecarError as e:
        LOGGER.warning("storing the model code at s3://%s/%s failed: %s", bucket, key, e)
        # The tenant's answer names no address of the store (the log above does).
        raise StoreUnavailableError(f"storing the model code at s3://{bucket}/{key} failed; try again shortly") from e
    finally:
        if not stored:  # refused, failed or cancelled: no part may stay behind
            await upload.abort()
    return ModelObject(bucket, key, upload.size, bool(summary.requirements))


def delete_quietly(store: S3Store, bucket: str, key: str) -> None:
    """Remove what a failed upload may have left; the store failing again is logged, not raised over the cause."""
    try:
        store.delete(bucket, key)
    except SidecarError as e:
        LOGGER.warning("could not remove s3://%s/%s after a failed upload: %s", bucket, key, e)


def _check_streamed(window: ZipWindow, limits: ModelLimits) -> ModelSummary:
    return check_model_archive(
        window.reader(),
        name="model",
        max_expanded_bytes=limits.max_expanded_bytes,
        max_members=limits.max_members,
        max_directory_bytes=limits.max_directory_bytes,
        locked=limits.locked,
    )
