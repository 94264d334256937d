"""Multipart uploads left open in an ended job's store are aborted when the scheduler starts, only under the
job's prefix and only past the grace (issue 27 D10), against the real SeaweedFS."""

from __future__ import annotations

import time
from typing import Any

import pytest

from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.core.uploads import abort_abandoned_uploads
from learnerkit.scheduler.jobs.s3clients import S3Clients
from tests.integration.scheduler.conftest import RESULTS_BUCKET, Harness, manifest

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

OTHER_BUCKET = "sched-other"


def open_keys(client: Any, bucket: str) -> set[str]:
    return {upload["Key"] for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])}


def begin(client: Any, bucket: str, key: str) -> None:
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"x" * 1024)


def test_a_start_aborts_the_uploads_an_ended_job_left_open_and_nothing_else(
    harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    client = scheduler_buckets
    create_bucket(client, OTHER_BUCKET)
    # No node has 1,000 CPUs: the job ends FAILED at its first admission pass.
    ended = harness.call(harness.service.submit("team-a", manifest(s3_server, "sleep 600", cpus=1000)))
    harness.wait_status("team-a", ended.job_id, {"FAILED"})
    running = harness.call(harness.service.submit("team-a", manifest(s3_server, "sleep 600")))
    abandoned = {f"{ended.job_id}/attempt-1/learner-1/results/model.pt", f"{ended.job_id}/model/model.zip"}
    kept = {f"{running.job_id}/attempt-1/learner-1/results/model.pt", f"{ended.job_id}x/results/model.pt"}
    for key in abandoned | kept:
        begin(client, RESULTS_BUCKET, key)
    begin(client, OTHER_BUCKET, f"{ended.job_id}/results/elsewhere.bin")
    try:
        # The start's own sweep, with the default grace of an hour: these uploads are minutes old.
        assert harness.call(harness.service.abort_abandoned_uploads()) == 0
        assert abandoned | kept <= open_keys(client, RESULTS_BUCKET)
        shared = harness.service.shared
        aborted = harness.call(
            abort_abandoned_uploads(
                list(shared.jobs.values()), S3Clients(), shared.options.platform, grace_s=0.001, now=time.time() + 1
            )
        )
        assert aborted == len(abandoned)
        still_open = open_keys(client, RESULTS_BUCKET)
        assert not abandoned & still_open and kept <= still_open
        assert open_keys(client, OTHER_BUCKET) == {f"{ended.job_id}/results/elsewhere.bin"}
    finally:
        harness.call(harness.service.cancel("team-a", running.job_id))
        for bucket in (RESULTS_BUCKET, OTHER_BUCKET):
            for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
