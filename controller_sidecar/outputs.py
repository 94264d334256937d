"""Uploads of what the learner leaves: checkpoints (periodically and at the end), results, metrics.

Every file is opened without following links (:mod:`controller_sidecar.jobfiles`); links and special files
in the results are skipped with a warning, and a file the sidecar may not read fails the upload naming it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from controller_sidecar.checkpointsync import upload_checkpoints
from controller_sidecar.clock import event_or_timeout
from controller_sidecar.errors import SidecarError, UnsafeFileError
from controller_sidecar.inputs import transfer_backoff
from controller_sidecar.jobfiles import open_learner_file, regular_files
from controller_sidecar.prom import SidecarMetrics, TransferKind
from controller_sidecar.retry import retry_async
from controller_sidecar.settings import S3Location, SidecarSettings

if TYPE_CHECKING:
    from controller_sidecar.s3store import S3Store

LOGGER = logging.getLogger(__name__)
CHECKPOINT_STATE = "upload-checkpoints.json"


async def store_checkpoints(settings: SidecarSettings, store: S3Store, metrics: SidecarMetrics) -> list[str]:
    """Upload every complete checkpoint not uploaded yet; a checkpoint's marker goes last."""
    uploaded = await retry_async(
        lambda: asyncio.to_thread(
            upload_checkpoints,
            store,
            settings.dirs.checkpoints,
            settings.locations.checkpoint_files,
            state_file=settings.dirs.control / CHECKPOINT_STATE,
        ),
        transfer_backoff(settings),
        what="upload checkpoints",
        on_retry=lambda _attempt, _error: metrics.record_retry("upload"),
    )
    if uploaded:
        LOGGER.info("checkpoints uploaded: %s", ", ".join(uploaded))
    return uploaded


async def store_tree(
    settings: SidecarSettings,
    store: S3Store,
    metrics: SidecarMetrics,
    folder: Path,
    location: S3Location,
    kind: TransferKind,
) -> int:
    """Upload every regular file under ``folder`` to ``location``, keeping relative paths; returns bytes."""
    total = 0
    try:
        names = await asyncio.to_thread(regular_files, folder, skip_folder=lambda name: name.startswith(".tmp-"))
    except UnsafeFileError as error:
        LOGGER.warning("nothing uploaded from %s: %s", folder, error)
        return 0
    for relative in names:
        path = folder / relative
        handle = await asyncio.to_thread(open_learner_file, path)
        if handle is None:
            continue
        key = location.key(relative)
        with handle:
            started = time.monotonic()
            stored = await retry_async(
                functools.partial(
                    asyncio.to_thread, store.upload_stream, handle, location.bucket, key, source=str(path)
                ),
                transfer_backoff(settings),
                what=f"upload {path}",
                on_retry=lambda _attempt, _error: metrics.record_retry("upload"),
            )
        metrics.record_transfer("upload", kind, stored.size, time.monotonic() - started)
        total += stored.size
    return total


async def periodic_checkpoints(
    settings: SidecarSettings, store: S3Store, metrics: SidecarMetrics, stop: asyncio.Event
) -> None:
    """While training: upload new checkpoints every interval, so a crash loses at most one interval."""
    while not await event_or_timeout(stop, settings.timing.checkpoint_interval_s):
        try:
            await store_checkpoints(settings, store, metrics)
        except SidecarError as e:
            # Not the job's failure: the next interval (or the final upload) tries again.
            LOGGER.warning("periodic checkpoint upload failed: %s", e)
