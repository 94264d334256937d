"""What a sidecar leaves in the store when its uploads are cut off, through a real pair (issue 27 D5, D10)."""

from __future__ import annotations

from typing import Any

import pytest

from controller_sidecar.status import Phase
from tests.integration.controller_sidecar.conftest import RESULTS_BUCKET, Pairs

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]


def open_keys(client: Any) -> set[str]:
    return {upload["Key"] for upload in client.list_multipart_uploads(Bucket=RESULTS_BUCKET).get("Uploads", [])}


def begin(client: Any, key: str) -> None:
    upload_id = client.create_multipart_upload(Bucket=RESULTS_BUCKET, Key=key)["UploadId"]
    client.upload_part(Bucket=RESULTS_BUCKET, Key=key, UploadId=upload_id, PartNumber=1, Body=b"x" * 1024)


def test_the_sidecar_aborts_the_uploads_left_open_under_its_outputs_at_teardown(pairs: Pairs) -> None:
    spec = pairs.spec(("sh", "-c", "echo done > /job/results/done.txt"), data_prefix=None)
    # What an earlier sidecar of this learner, killed while storing, left open; and a neighbour's upload.
    mine = {f"{spec.job_id}/learner-1/results/model.pt", f"{spec.job_id}/learner-1/checkpoints/ckpt-1/w.bin"}
    neighbour = f"{spec.job_id}/learner-10/results/model.pt"
    for key in (*mine, neighbour):
        begin(pairs.s3_client, key)
    try:
        handle = pairs.start(spec)
        final = pairs.wait_terminal(handle, spec.job_id, timeout=180)
        assert final.phase is Phase.COMPLETED, pairs.describe(handle, spec.job_id)
        still_open = open_keys(pairs.s3_client)
        assert not mine & still_open and neighbour in still_open, pairs.describe(handle, spec.job_id)
    finally:
        for upload in pairs.s3_client.list_multipart_uploads(Bucket=RESULTS_BUCKET).get("Uploads", []):
            if upload["Key"].startswith(spec.job_id):
                pairs.s3_client.abort_multipart_upload(
                    Bucket=RESULTS_BUCKET, Key=upload["Key"], UploadId=upload["UploadId"]
                )
