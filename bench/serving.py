"""What the scheduler benchmarks share: the real REST API over a real Scheduler in a child process, and the
wait for it to answer. Run as a script (``python bench/serving.py ETCD S3 TOKENS FD``), it is that child for
:func:`scheduler_without_nodes`."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import uvicorn

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.s3 import SeaweedServer
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.api.server import uvicorn_config
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.errors import SchedulerUnreachableError
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.jobs.store import JobStore

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]
TENANT = "bench"


def listening_socket() -> socket.socket:
    """A socket listening on 127.0.0.1 at a port the kernel picked, for :func:`start_api`: the child serves on
    this very socket, so no other process can take the port between choosing it and serving on it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def start_api(argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` plus the number of a listening socket (see :func:`listening_socket`) it inherits; returns the
    child and the socket's port. The child passes that number to :func:`serve_scheduler`."""
    with listening_socket() as sock:
        child = subprocess.Popen(
            [*argv, str(sock.fileno())],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            pass_fds=(sock.fileno(),),
        )
        return child, int(sock.getsockname()[1])


def serve_scheduler(scheduler: Scheduler, store: JobStore, etcd_endpoint: str, tokens: Path, fd: int) -> None:
    """Serve the API on the inherited listening socket ``fd`` until killed: etcd connected, jobs rebuilt and the
    loop running."""

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        etcd = await EtcdStore.connect(EtcdSettings(endpoints=(etcd_endpoint,)))
        store.attach(etcd)
        await scheduler.loop.rebuild()
        stop = asyncio.Event()
        loop = asyncio.create_task(scheduler.loop.run(stop))
        try:
            yield
        finally:
            stop.set()
            await loop
            await etcd.close()

    app = create_app(scheduler, tokens, lifespan=lifespan)
    sock = socket.socket(fileno=fd)
    host, port = sock.getsockname()
    uvicorn.Server(uvicorn_config(app, host, port, "warning")).run(sockets=[sock])


def once_served(call: Callable[[], T], child: subprocess.Popen[bytes], timeout_s: float) -> T:
    """``call``'s answer once the child's API answers; its error when the child died or the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except SchedulerUnreachableError:
            if time.monotonic() > deadline or child.poll() is not None:
                raise
            time.sleep(0.2)


def serve_without_nodes(etcd_endpoint: str, s3_endpoint: str, tokens: Path, fd: int) -> None:
    """The real Scheduler behind the real API, on a backend with no nodes: a job is stored and recorded, then
    ends FAILED (unschedulable), and what is stored under it can be read all the same."""

    from learnerkit.scheduler.admission.capacity import Node
    from learnerkit.scheduler.backends.deployment import JobDeployment
    from learnerkit.scheduler.config.policy import SubmitPolicy, origin
    from learnerkit.scheduler.core.options import SchedulerOptions
    from learnerkit.scheduler.core.planning import Platform
    from learnerkit.scheduler.core.scheduler import Scheduler
    from learnerkit.scheduler.jobs.store import JobStore

    class NoNodes:
        deploys_held = False

        def nodes(self) -> list[Node]:
            return []

        def node_health(self) -> dict[str, NodeHealth]:
            return {}

        def deploy(self, job: JobDeployment) -> None:
            raise AssertionError("nothing is deployed")

        def started(self, job_id: str, learners: int) -> bool:
            return False

        def sidecars(self, job_id: str) -> SidecarStates:
            return SidecarStates()

        def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
            return {}

        def teardown(self, job_id: str) -> None:
            pass

        def job_ids(self, instance: str) -> set[str]:
            return set()

    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_endpoint, sidecar_image="unused"),
        catalog=None,
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_endpoint)),)),
    )
    store = JobStore()
    scheduler = Scheduler(store, NoNodes(), options)

    serve_scheduler(scheduler, store, etcd_endpoint, tokens, fd)


def rss_peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def rss_now_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def bench_manifest(name: str, bucket: str, endpoint: str, access_key: str, secret_key: str, command: str) -> str:
    """A one-learner PyTorch manifest whose data and results share ``bucket`` on the bench's own S3."""
    return f"""\
name: {name}
cpus: 0.1
memory: 128Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {bucket}}}
    training_results: {{container: {bucket}}}
    connection: {{auth_url: "{endpoint}", user_name: "{access_key}", password: "{secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: "{command}"
"""


@dataclass(frozen=True)
class Served:
    """What :func:`scheduler_without_nodes` started: the object store (with its plain boto3 client), the API's
    child process and a client of it for the tenant ``bench``."""

    s3: SeaweedServer
    boto: Any
    child: subprocess.Popen[bytes]
    client: SchedulerClient
    scratch: Path
    bucket: str

    def manifest(self, name: str, command: str = "true") -> str:
        """:func:`bench_manifest` on this object store and bucket."""
        s3 = self.s3
        return bench_manifest(name, self.bucket, s3.endpoint_url, s3.access_key, s3.secret_key, command)

    def first_submit(self, manifest_text: str, model: Path | None = None) -> JobView:
        """The first submit, sent once the child's API answers."""
        return once_served(lambda: self.client.submit(manifest_text, model=model), self.child, 60)


@contextmanager
def scheduler_without_nodes(bucket: str, prefix: str) -> Iterator[Served]:
    """etcd and SeaweedFS on loopback with ``bucket`` made, and the API of :func:`serve_without_nodes` in a child
    process (this file run as a script); everything stopped and removed at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        scratch = Path(tmp)
        etcd, s3 = EtcdServer("/usr/bin/etcd", scratch / "etcd" / "data"), SeaweedServer(scratch / "s3")
        tokens = scratch / "tokens.json"
        token = add_token(tokens, TENANT)
        etcd.start()
        s3.start()
        child = None
        try:
            boto = s3.client()
            boto.create_bucket(Bucket=bucket)
            child, port = start_api([sys.executable, __file__, etcd.endpoint, s3.endpoint_url, str(tokens)])
            client = SchedulerClient(f"http://127.0.0.1:{port}", token, timeout_s=300)
            yield Served(s3, boto, child, client, scratch, bucket)
        finally:
            if child is not None:
                child.terminate()
                child.wait(30)
            etcd.stop()
            s3.stop()


if __name__ == "__main__":
    serve_without_nodes(sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
