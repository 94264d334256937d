"""What an attempt stored that tells what its end lost: its newest checkpoint, and the steps done after it.

The newest complete checkpoint of attempt ``k``'s learner ``n`` (``attempt-<k>/learner-<n>/checkpoints/ckpt-<step>/``
with its ``.complete`` marker) is the one learner ``n`` of attempt ``k+1`` restores; the SHA-256 of its marker
names it, as the sidecar that restores it names it (:func:`controller_sidecar.checkpointsync.checkpoint_digest`).
The steps the learner's metric history holds past that checkpoint's step were done and are done again: their
count, and the time between the checkpoint's step and the last one, are the work it lost.

A job of several learners (a gang) lost what its learner that lost most lost: they train side by side, so the job
is back where it was only once that one is. Its checkpoint is named by learner 1's, as its provenance names it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controller_sidecar.checkpointsync import CHECKPOINT_NAME, MARKER, checkpoint_digest
from controller_sidecar.metricrecords import serve_records
from controller_sidecar.retry import HOST_CALLS, retry_sync
from controller_sidecar.settings import S3Location
from learnerkit.scheduler.outputs.files import metrics_history

if TYPE_CHECKING:
    from controller_sidecar.s3store import S3Store


@dataclass(frozen=True)
class StoredCheckpoint:
    step: int
    digest: str
    """SHA-256 of its marker: its files with their sizes and ETags."""


@dataclass(frozen=True)
class LostWork:
    steps: int
    seconds: float | None
    """From the records' times; None where they carry none."""


@dataclass(frozen=True)
class AttemptRecord:
    """What the attempt's learners stored: the checkpoint the next attempt's first learner restores, and the work
    lost."""

    checkpoint: StoredCheckpoint | None
    lost: LostWork | None


def lost_after(records: Iterable[Mapping[str, Any]], checkpoint_step: int) -> LostWork | None:
    """The steps (and training seconds) of ``records`` past ``checkpoint_step`` (0: no checkpoint); None when no
    record has a step. The seconds run from the last record at or before the checkpoint's step to the last one."""
    stepped = [(int(r["step"]), r.get("time")) for r in records if r.get("step") is not None]
    if not stepped:
        return None
    last_step = max(step for step, _ in stepped)
    at_end = [float(t) for step, t in stepped if step == last_step and t is not None]
    at_checkpoint = [float(t) for step, t in stepped if step <= checkpoint_step and t is not None]
    seconds = max(0.0, max(at_end) - max(at_checkpoint)) if at_end and at_checkpoint else None
    return LostWork(max(0, last_step - checkpoint_step), seconds)


def most_lost(losses: Iterable[LostWork | None]) -> LostWork | None:
    """A gang's work lost from its learners': the most steps any lost, and the most seconds where every learner
    that lost steps has its seconds (otherwise the learners' times do not tell it: None). Learners whose history
    has no step (a gang whose first learner alone reports metrics) say nothing; None where none has one."""
    known = [lost for lost in losses if lost is not None]
    if not known:
        return None
    timed = [lost.seconds for lost in known if lost.seconds is not None]
    untimed = any(lost.seconds is None and lost.steps > 0 for lost in known)
    return LostWork(max(lost.steps for lost in known), max(timed) if timed and not untimed else None)


def newest_checkpoint(store: S3Store, checkpoints: S3Location) -> StoredCheckpoint | None:
    """The newest checkpoint under ``checkpoints`` (a learner's ``.../checkpoints/``) whose marker is stored."""
    listed = retry_sync(lambda: store.list(checkpoints), HOST_CALLS, what=f"list {checkpoints}")
    steps = []
    for obj in listed:
        name, _, rest = obj.key[len(checkpoints.prefix) :].partition("/")
        if rest == MARKER and CHECKPOINT_NAME.fullmatch(name):
            steps.append(int(name.removeprefix("ckpt-")))
    if not steps:
        return None
    step = max(steps)
    return StoredCheckpoint(step, checkpoint_digest(store, checkpoints, step, backoff=HOST_CALLS))


def attempt_record(store: S3Store, job: S3Location, attempt: int, learners: int) -> AttemptRecord:
    """Read what attempt ``attempt``'s learners (1 to ``learners``) stored under the job's prefix ``job``."""
    each = [learner_record(store, job, attempt, learner_id) for learner_id in range(1, learners + 1)]
    return AttemptRecord(each[0].checkpoint, most_lost(record.lost for record in each))


def learner_record(store: S3Store, job: S3Location, attempt: int, learner_id: int) -> AttemptRecord:
    """Read what attempt ``attempt``'s learner ``learner_id`` stored under the job's prefix ``job``."""
    checkpoints = S3Location(job.bucket, job.key(f"attempt-{attempt}/learner-{learner_id}/checkpoints/"))
    checkpoint = newest_checkpoint(store, checkpoints)
    history = metrics_history(store, job, attempt, learner_id, first=attempt)
    records = [json.loads(line) for line in serve_records(history.chunks)]
    return AttemptRecord(checkpoint, lost_after(records, checkpoint.step if checkpoint else 0))
