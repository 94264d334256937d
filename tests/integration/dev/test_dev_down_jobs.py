"""`learnerkit dev down` with a job still running on the dev services (issue 27): it says so, halts the job and
tears its pair down, so no sidecar is left retrying an etcd and S3 that are gone."""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.status import Phase
from learnerkit.common import engine
from learnerkit.dev.s3 import create_bucket, s3_client
from learnerkit.pair.docker import pairs_of, remove_pair, start_pair
from learnerkit.pair.etcd import etcd_settings, learner_status
from learnerkit.pair.spec import PairSpec
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.integration.dev.test_dev_services import dev, dev_json
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(400)]

LEARNER_IMAGE = "learnerkit/pytorch:2.13-cpu-py3.11"
RESULTS = "lk-dev-down"


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    try:
        yield tmp_path
    finally:
        dev(tmp_path, "down", check=False)


def test_down_halts_a_running_job_and_removes_its_pair(state_dir: Path, build_inputs: BuildInputs) -> None:
    if engine.image_id(LEARNER_IMAGE) is None:
        pytest.fail(f"{LEARNER_IMAGE} is not built: run `make images`")
    built = build_sidecar(REPO, build_inputs, lambda line: None)
    dev_json(state_dir, "up", "--any-port")
    env = dict(word.split("=", 1) for word in shlex.split(dev(state_dir, "env").stdout)[1:])
    create_bucket(s3_client(env["S3_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]), RESULTS)
    job_id = f"t-{uuid.uuid4().hex[:10]}"
    spec = PairSpec(
        job_id=job_id,
        learner_id=1,
        learner_image=LEARNER_IMAGE,
        sidecar_image=built.immutable_reference or built.reference,
        command="echo training; sleep 600",
        sidecar_config={
            "results": {"bucket": RESULTS, "prefix": f"{job_id}/"},
            "data": {"mode": "mount"},
            "timing": {"halt_grace_s": 2, "poll_interval_s": 0.05},
            "metrics_port": 0,
        },
        endpoints=Endpoints(
            etcd_endpoints=env["ETCD_ENDPOINTS"],
            s3_endpoint_url=env["S3_ENDPOINT_URL"],
            s3_access_key=env["AWS_ACCESS_KEY_ID"],
            s3_secret_key=env["AWS_SECRET_ACCESS_KEY"],
        ),
        halt_grace_s=2,
    )
    handle = start_pair(spec)
    try:
        settings = etcd_settings(env["ETCD_ENDPOINTS"])

        def processing() -> bool:
            record = learner_status(settings, job_id, 1)
            return record is not None and record.phase is Phase.PROCESSING

        assert wait_until(processing, 120), "the pair never reached PROCESSING"

        done = dev(state_dir, "down", "--output", "json")

        assert sorted(row["name"] for row in json.loads(done.stdout)) == ["etcd", "registry", "s3"]
        assert f"job {job_id}: halted" in done.stderr, done.stderr
        assert pairs_of(job_id) == [], "a pair of the job is still on the engine"
        volumes: list[Any] = engine.engine().volumes.list(filters={"name": handle.volume})
        assert volumes == []
    finally:
        remove_pair(handle)
