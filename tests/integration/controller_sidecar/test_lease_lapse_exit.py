"""A sidecar whose etcd stops answering while it stores its outputs (etcd frozen with SIGSTOP: the process lives on,
its port accepts, nothing answers, as an overloaded etcd looks) holds its writes back once its lease may have
lapsed, gives them up after ``timing.held_back_give_up_s``, reports no final status and exits
``LEASE_LAPSED_EXIT`` with one line saying so; started again once etcd answers, as the Docker backend restarts an
ended sidecar, it stores the results on the kept ``/job`` and reports COMPLETED (docs/security.md, "Fencing").

The real sidecar process (``python -m controller_sidecar``, this checkout's code, not the image), with an etcd of
this test's own and the session's SeaweedFS; the learner is played by the test through the control files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller_sidecar.control import EXIT_FILE, START_FILE
from controller_sidecar.endpoints import ETCD_ENDPOINTS, S3_ACCESS_KEY, S3_ENDPOINT_URL, S3_SECRET_KEY
from controller_sidecar.exits import DONE_EXIT, LEASE_LAPSED_EXIT
from controller_sidecar.settings import CONFIG_JSON_ENV
from controller_sidecar.status import Phase
from learnerkit.dev.etcd import EtcdServer, etcd_binary
from learnerkit.dev.s3 import SeaweedServer, create_bucket
from learnerkit.pair.etcd import learner_status
from tests.integration.conftest import REPO
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(180)]

BUCKET = "lk-lapse"
GIVE_UP_S = 3.0
HELD_BACK = "the sidecar's lease may have expired (etcd unanswered)"
"""What the sidecar logs as a write is first held back (`Fence.check`)."""
UNANSWERED = "/learners/1/alive alive failed"
"""What the sidecar logs as a refresh of its lease first fails."""


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd of this test's own, which the test freezes and thaws (never another's)."""
    server = EtcdServer(etcd_binary(), tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


class SidecarProcess:
    """``python -m controller_sidecar`` for one learner, its log in a file."""

    def __init__(self, tmp_path: Path, etcd: EtcdServer, s3: SeaweedServer) -> None:
        self.job = f"job-{uuid.uuid4().hex[:12]}"
        self.job_dir = tmp_path / "job"
        self.log = tmp_path / "sidecar.log"
        self.etcd = etcd
        doc = {
            "job_id": self.job,
            "learner_id": 1,
            "data": {"mode": "mount"},
            "results": {"bucket": BUCKET, "prefix": f"{self.job}/attempt-1/learner-1/"},
            "job_dir": str(self.job_dir),
            "etcd": {"lease_ttl_s": 2},
            "timing": {"poll_interval_s": 0.05, "log_ship_interval_s": 0.2, "held_back_give_up_s": GIVE_UP_S},
            "metrics_port": 0,
        }
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            ETCD_ENDPOINTS: etcd.endpoint,
            S3_ENDPOINT_URL: s3.endpoint_url,
            S3_ACCESS_KEY: s3.access_key,
            S3_SECRET_KEY: s3.secret_key,
            CONFIG_JSON_ENV: json.dumps(doc),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "controller_sidecar"], cwd=REPO, env=self.env, stdout=log, stderr=log
            )

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def lines(self) -> list[str]:
        return [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def sidecar(tmp_path: Path, etcd: EtcdServer, s3_server: SeaweedServer) -> Iterator[SidecarProcess]:
    create_bucket(s3_server.client(), BUCKET)
    process = SidecarProcess(tmp_path, etcd, s3_server)
    try:
        yield process
    finally:
        process.kill()


def test_a_sidecar_whose_etcd_stops_answering_gives_up_with_its_own_status_and_a_restart_stores_the_results(
    sidecar: SidecarProcess, etcd: EtcdServer, s3_server: SeaweedServer
) -> None:
    control, results = sidecar.job_dir / "control", sidecar.job_dir / "results"
    sidecar.start()
    wait_until(lambda: (control / START_FILE).exists(), timeout=60, message="the sidecar starting the learner")
    wait_until(
        lambda: (
            (found := learner_status(sidecar.etcd.settings(), sidecar.job, 1)) is not None
            and found.phase is Phase.PROCESSING
        ),
        timeout=30,
        message="PROCESSING in etcd",
    )
    results.mkdir(parents=True, exist_ok=True)
    (results / "model.bin").write_bytes(b"weights" * 1000)

    with etcd.paused():
        # A refresh sent after the last one etcd answered fails only after the gateway's read timeout, longer than
        # the two thirds of the TTL the lease is known held after a refresh's sending: from then on the writes wait.
        wait_until(
            lambda: any(UNANSWERED in line for line in sidecar.lines()), timeout=60, message="a refresh unanswered"
        )
        (control / EXIT_FILE).write_text(json.dumps({"exit_code": 0, "reason": "completed"}))
        wait_until(lambda: any(HELD_BACK in line for line in sidecar.lines()), timeout=30, message="a write held back")

        assert sidecar.wait(timeout=60) == LEASE_LAPSED_EXIT, sidecar.lines()[-20:]
        last = sidecar.lines()[-1]
        assert "gave up while the sidecar's lease may have lapsed (etcd unanswered)" in last, last
        assert f"exiting with status {LEASE_LAPSED_EXIT}" in last and "resumes from its last checkpoint" in last, last
        assert not any("results not stored" in line for line in sidecar.lines()), "no FAILED outcome was made"

    status = learner_status(sidecar.etcd.settings(), sidecar.job, 1)
    assert status is not None and not status.phase.terminal, status  # no final status: the scheduler decides

    sidecar.start()  # as the Docker backend starts an ended sidecar again, on the kept /job
    assert sidecar.wait(timeout=90) == DONE_EXIT, sidecar.lines()[-20:]
    status = learner_status(sidecar.etcd.settings(), sidecar.job, 1)
    assert status is not None and status.phase is Phase.COMPLETED, status
    stored = s3_server.client().get_object(Bucket=BUCKET, Key=f"{sidecar.job}/attempt-1/learner-1/results/model.bin")
    assert stored["Body"].read() == b"weights" * 1000
