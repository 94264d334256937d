"""Uploads of what the learner leaves: checkpoints (periodically and at the end), results, metrics.

Every file is opened without following links (:mod:`controller_sidecar.jobfiles`); links and special files
in the results are skipped with a warning. A result that cannot be stored (a key S3 cannot hold, a file the
sidecar may not read, a store that refuses it) is recorded by name and the others are still stored.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from controller_sidecar.checkpointsync import upload_checkpoints
from controller_sidecar.clock import event_or_timeout
from controller_sidecar.errors import SidecarError, UnsafeFileError
from controller_sidecar.fence import LeaseLapsedError
from controller_sidecar.inputs import transfer_backoff
from controller_sidecar.jobfiles import open_learner_file, regular_files
from controller_sidecar.outcome import Outcome
from controller_sidecar.prom import SidecarMetrics, TransferKind
from controller_sidecar.resultkeys import ResultRefused, encoded_name, result_key
from controller_sidecar.retry import Backoff, retry_async
from controller_sidecar.s3objects import HashedObject
from controller_sidecar.settings import S3Location, SidecarSettings
from controller_sidecar.status import ErrorCode, Phase

if TYPE_CHECKING:
    from controller_sidecar.s3store import S3Store

LOGGER = logging.getLogger(__name__)
CHECKPOINT_STATE = "upload-checkpoints.json"
SHOWN_REFUSALS = 5
"""Files named in the final status; the sidecar's log names every one."""
SHOWN_REASON_CHARS = 160
HELD_BACK_RAISES = Backoff(held_back_s=0.0)
"""Each request of a checkpoint's upload: a write held back by a lapsed lease ends the pass at once, and the
pass's own retry (:func:`transfer_backoff`) waits for the lease, bounded once for the whole pass."""


async def store_checkpoints(settings: SidecarSettings, store: S3Store, metrics: SidecarMetrics) -> list[str]:
    """Upload every complete checkpoint not uploaded yet; a checkpoint's marker goes last."""
    uploaded = await retry_async(
        lambda: asyncio.to_thread(
            upload_checkpoints,
            store,
            settings.dirs.checkpoints,
            settings.locations.checkpoint_files,
            state_file=settings.dirs.control / CHECKPOINT_STATE,
            backoff=HELD_BACK_RAISES,
        ),
        transfer_backoff(settings),
        what="upload checkpoints",
        on_retry=lambda _attempt, _error: metrics.record_retry("upload"),
    )
    if uploaded:
        LOGGER.info("checkpoints uploaded: %s", ", ".join(uploaded))
    return uploaded


@dataclass
class StoredTree:
    """What :func:`store_tree` did: the bytes stored, and each file it could not store with the reason."""

    size: int = 0
    files: int = 0
    """Files stored whole."""
    refused: list[ResultRefused] = field(default_factory=list)
    stored: list[HashedObject] = field(default_factory=list)
    """Each stored object with the SHA-256 of the bytes uploaded."""

    def summary(self) -> str:
        """The files not stored, for a status message: at most :data:`SHOWN_REFUSALS` of them, each cut short."""
        shown = "; ".join(str(refusal) for refusal in self.refused[:SHOWN_REFUSALS])
        more = len(self.refused) - SHOWN_REFUSALS
        return f"{shown}; and {more} more (the sidecar's log names each)" if more > 0 else shown

    def applied_to(self, outcome: Outcome) -> Outcome:
        """``outcome`` with the results not stored: a COMPLETED job becomes FAILED (``UPLOAD_FAILED``), any
        other keeps its phase; the message names them."""
        if not self.refused:
            return outcome
        note = f"{len(self.refused)} result(s) not stored: {self.summary()}"
        if outcome.phase is Phase.COMPLETED:
            return Outcome(Phase.FAILED, ErrorCode.UPLOAD_FAILED, note, outcome.exit_code)
        message = f"{outcome.message}; {note}" if outcome.message else note
        return Outcome(outcome.phase, outcome.error_code, message, outcome.exit_code)


def stored_again(outcome: Outcome, results: StoredTree, storing_starts: int) -> Outcome:
    """``outcome``, saying so when an earlier sidecar of this learner was cut off while storing (the ``storing_starts``
    -th began it) and this one stored the outputs again: how many result files are complete, and how many are not."""
    if storing_starts <= 1:
        return outcome
    missing = f", {len(results.refused)} not stored" if results.refused else ""
    note = (
        f"outputs stored again after {storing_starts - 1} interrupted attempt(s): {results.files} result file(s)"
        f" complete{missing}"
    )
    message = f"{outcome.message}; {note}" if outcome.message else note
    return Outcome(outcome.phase, outcome.error_code, message, outcome.exit_code)


async def store_tree(
    settings: SidecarSettings,
    store: S3Store,
    metrics: SidecarMetrics,
    folder: Path,
    location: S3Location,
    kind: TransferKind,
) -> StoredTree:
    """Upload every regular file under ``folder`` to ``location``, each under its own key
    (:func:`~controller_sidecar.resultkeys.result_key`).

    A file that cannot be stored (its key too long, unreadable, refused by the store) is recorded with the
    reason and the others are still stored; links and special files are skipped with a warning.
    """
    outcome = StoredTree()
    try:
        names = await asyncio.to_thread(regular_files, folder, skip_folder=lambda name: name.startswith(".tmp-"))
    except UnsafeFileError as error:
        LOGGER.warning("nothing uploaded from %s: %s", folder, error)
        return outcome
    for relative in names:
        try:
            stored = await _store_file(settings, store, metrics, folder / relative, location, relative, kind)
        except ResultRefused as refusal:
            LOGGER.warning("not stored: %s/%s: %s", folder, encoded_name(relative), refusal.reason)
            outcome.refused.append(refusal)
        except LeaseLapsedError:
            raise  # not the file's fault: nothing more is stored until the lease is known held again
        except (SidecarError, OSError) as error:
            LOGGER.warning("not stored: %s/%s: %s", folder, encoded_name(relative), error)
            outcome.refused.append(ResultRefused(relative, _short(str(error))))
        else:
            if stored is not None:
                outcome.size += stored.size
                outcome.files += 1
                outcome.stored.append(stored)
    return outcome


async def _store_file(
    settings: SidecarSettings,
    store: S3Store,
    metrics: SidecarMetrics,
    path: Path,
    location: S3Location,
    relative: str,
    kind: TransferKind,
) -> HashedObject | None:
    """Upload one file; what was stored (None when it is gone or turned out to be a link)."""
    key = result_key(location.prefix, relative)
    handle = await asyncio.to_thread(open_learner_file, path)
    if handle is None:
        return None
    with handle:
        started = time.monotonic()
        stored = await retry_async(
            functools.partial(asyncio.to_thread, store.upload_stream, handle, location.bucket, key, source=str(path)),
            transfer_backoff(settings),
            what=f"upload {encoded_name(str(path))}",
            on_retry=lambda _attempt, _error: metrics.record_retry("upload"),
        )
    metrics.record_transfer("upload", kind, stored.size, time.monotonic() - started)
    return stored


def _short(reason: str) -> str:
    """A store's or the system's reason, cut for a status message (the full one is in the log)."""
    return reason if len(reason) <= SHOWN_REASON_CHARS else reason[:SHOWN_REASON_CHARS] + "..."


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
