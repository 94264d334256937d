"""What a console page shows of the facade's views: plain data for the templates, worked out here so the
templates only lay it out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import yaml

from learnerkit.scheduler.facade import AttemptView, JobView

STATUSES = (
    "QUEUED",
    "PENDING",
    "DOWNLOADING",
    "PROCESSING",
    "STORING",
    "COMPLETED",
    "FAILED",
    "HALTED",
    "CANCELLED",
    "PREEMPTED",
)
ENDED = frozenset({"COMPLETED", "FAILED", "HALTED", "CANCELLED"})
SORTS = {
    "-submitted": "newest first",
    "submitted": "oldest first",
    "name": "name A-Z",
    "-name": "name Z-A",
    "status": "status A-Z",
    "-status": "status Z-A",
}
LOG_TAIL_LINES = 200
LOG_RANGE_BYTES = 64 * 1024
"""One page of an earlier range of a log."""


@dataclass(frozen=True)
class TimelineEntry:
    label: str
    at: str
    """Readable UTC time; empty when unknown."""
    detail: str = ""


def readable_time(iso: str) -> str:
    """``2026-11-28T12:00:03.5+00:00`` -> ``2026-11-28 12:00:03 UTC``; the text itself when it is no time."""
    if not iso:
        return ""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def status_reason(job: JobView) -> str:
    """The sentence under a job's status: why it waits, or why it ended."""
    if job.reason:
        return ("Ended: " if job.status in ENDED else "Waiting: ") + job.reason
    return ""


def timeline(job: JobView) -> list[TimelineEntry]:
    """Submitted, then each attempt's start and end, with its reason and the work it lost."""
    entries = [TimelineEntry("submitted", readable_time(job.submitted_at))]
    for attempt in job.attempts:
        entries.append(_started(attempt))
        if attempt.ended_by is not None:
            entries.append(_ended(attempt))
    return entries


def _started(attempt: AttemptView) -> TimelineEntry:
    detail = f"on {', '.join(attempt.nodes)}" if attempt.nodes else ""
    if attempt.resumed_from is not None:
        detail = f"resumed from attempt {attempt.resumed_from}'s checkpoint" + (f", {detail}" if detail else "")
    return TimelineEntry(f"attempt {attempt.number} started", readable_time(attempt.started_at), detail)


def _ended(attempt: AttemptView) -> TimelineEntry:
    parts = [attempt.reason] if attempt.reason else []
    if attempt.steps_lost:
        parts.append(f"{attempt.steps_lost} step(s) lost")
    if attempt.work_lost_s:
        parts.append(f"{attempt.work_lost_s:.0f} s of training lost")
    label = f"attempt {attempt.number} {(attempt.ended_by or '').lower()}"
    return TimelineEntry(label, readable_time(attempt.ended_at or ""), "; ".join(parts))


RESOURCE_FIELDS = (
    ("learners", "Learners"),
    ("cpus", "CPUs"),
    ("gpus", "GPUs"),
    ("gpu_type", "GPU type"),
    ("memory", "Memory"),
)
"""What each learner asks for, by the manifest's own field names (docs/manifests.md)."""


def resources(manifest_text: str) -> list[tuple[str, str]]:
    """The manifest's resource fields it sets, as (label, value); the text is one the parser accepted."""
    doc = yaml.safe_load(manifest_text)
    if not isinstance(doc, dict):
        return []
    return [(label, str(doc[key])) for key, label in RESOURCE_FIELDS if doc.get(key) not in (None, "")]


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
