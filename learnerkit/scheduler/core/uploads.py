"""Multipart uploads abandoned in the results stores of ended jobs, aborted when the scheduler starts.

An upload cut off (a sidecar killed while storing, a scheduler that crashed during a model upload) leaves its
parts in the store, invisible to listings and billed, until it is aborted. Each sidecar aborts its own at
teardown; what a killed sidecar or scheduler left is found here, under the jobs' own prefixes only, in ended
jobs only (nothing of theirs still uploads), and only past a grace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.planning import Platform, endpoints_for
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.jobs.layout import job_location
from learnerkit.scheduler.jobs.s3clients import S3Clients

LOGGER = logging.getLogger(__name__)
MAX_JOBS_SWEPT = 1000
"""The most recently submitted ended jobs whose stores a start looks at."""
MAX_UPLOADS_PER_JOB = 1000


async def abort_abandoned_uploads(
    jobs: Iterable[Tracked],
    clients: S3Clients,
    platform: Platform,
    *,
    grace_s: float,
    now: float,
    max_jobs: int = MAX_JOBS_SWEPT,
) -> int:
    """Abort the open multipart uploads begun more than ``grace_s`` before ``now`` under each ended job's prefix
    (at most ``max_jobs`` jobs, the newest first); how many were aborted. A store that fails is logged and
    skipped for the rest of the sweep."""
    ended = sorted((t for t in jobs if t.state.stage is Stage.DONE), key=lambda t: -t.state.submitted_at)
    before = datetime.fromtimestamp(now - grace_s, UTC)
    failed: set[str | None] = set()
    aborted = 0
    for tracked in ended[:max_jobs]:
        job_id = tracked.state.job_id
        try:
            endpoints = endpoints_for(tracked.manifest, platform)
            bucket, prefix = job_location(tracked.manifest, job_id)
        except LearnerkitError:
            continue  # no results store: nothing was uploaded
        if endpoints.s3_endpoint_url in failed:
            continue
        store = clients.of(endpoints)
        try:
            uploads = await asyncio.to_thread(
                store.abort_open_uploads, bucket, prefix, initiated_before=before, limit=MAX_UPLOADS_PER_JOB
            )
        except LearnerkitError as e:
            LOGGER.warning("job %s: its abandoned multipart uploads were not aborted: %s", job_id, e)
            failed.add(endpoints.s3_endpoint_url)
            continue
        for upload in uploads:
            LOGGER.info("job %s: aborted the abandoned multipart upload of s3://%s/%s", job_id, bucket, upload.key)
        aborted += len(uploads)
    return aborted
