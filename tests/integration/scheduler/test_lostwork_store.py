"""An attempt's figures read back from the real SeaweedFS: the newest checkpoint whose marker is stored (its
digest the marker's SHA-256, as the restoring sidecar names it) and the steps of the metric history after it."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import pytest

from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location, S3Settings
from learnerkit.scheduler.outputs.lostwork import attempt_record
from tests.integration.scheduler.conftest import RESULTS_BUCKET

pytestmark = [pytest.mark.integration, pytest.mark.services]


def test_the_newest_stored_checkpoint_and_the_steps_after_it(s3_server: Any, scheduler_buckets: Any) -> None:
    job = S3Location(RESULTS_BUCKET, f"lostwork-{uuid.uuid4().hex[:8]}/job-1/")
    learner = f"{job.prefix}attempt-2/learner-1/"
    marker = json.dumps({"files": {"step": {"size": 2}}}).encode()
    objects = {
        f"{learner}checkpoints/ckpt-0000000010/step": b"10",
        f"{learner}checkpoints/ckpt-0000000010/.complete": b"{}",
        f"{learner}checkpoints/ckpt-0000000020/step": b"20",
        f"{learner}checkpoints/ckpt-0000000020/.complete": marker,
        f"{learner}checkpoints/ckpt-0000000030/step": b"30",  # its upload cut short: no marker
        f"{learner}logs/metrics.jsonl": b"".join(
            json.dumps({"step": step, "time": 100.0 + step / 10, "values": {"loss": 1 / step}}).encode() + b"\n"
            for step in range(1, 35)
        ),
        f"{job.prefix}attempt-1/learner-1/logs/metrics.jsonl": b'{"step": 99, "time": 1.0, "values": {}}\n',
    }
    for key, body in objects.items():
        scheduler_buckets.put_object(Bucket=RESULTS_BUCKET, Key=key, Body=body)
    store = S3Store(
        S3Settings(
            endpoint_url=s3_server.endpoint_url, access_key=s3_server.access_key, secret_key=s3_server.secret_key
        )
    )

    found = attempt_record(store, job, 2, 1)
    assert found.checkpoint is not None
    assert (found.checkpoint.step, found.checkpoint.digest) == (20, hashlib.sha256(marker).hexdigest())
    assert found.lost is not None and found.lost.steps == 14, "steps 21..34, only attempt 2's history"
    assert found.lost.seconds == pytest.approx(1.4)

    nothing = attempt_record(store, job, 3, 1)
    assert (nothing.checkpoint, nothing.lost) == (None, None)
