"""`job logs --attempt N` over the real REST API: a preempted then resumed job's first attempt's log, its halt
included, read back from the real SeaweedFS through a real Scheduler restored from the real etcd."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from controller_sidecar.logship import part_name
from learnerkit.cli import cli
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.errors import ApiError
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.conftest import REPO
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

BUCKET = "logs-attempts"
FIRST = [b"step 10 loss 0.9\n", b"step 20 loss 0.7\nhalt requested: checkpoint at step 20\nhalted (exit 143)\n"]
SECOND = [b"restored step 20\nstep 30 loss 0.5\n"]


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    job_id: str


def _manifest(s3: Any) -> str:
    return f"""\
name: preempted
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {BUCKET}}}
    training_results: {{container: {BUCKET}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: "true"
"""


@pytest.fixture
def served(etcd_server: Any, s3_server: Any, tmp_path: Path) -> Iterator[Served]:
    """A HALTED job in its second attempt, each attempt's log shipped in parts as the sidecar ships them."""
    s3 = s3_server.client()
    create_bucket(s3, BUCKET)
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    for attempt, parts in ((1, FIRST), (2, SECOND)):
        for n, data in enumerate(parts, start=1):
            s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-{attempt}/learner-1/logs/{part_name(n)}", Body=data)
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "team-a")
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    text = _manifest(s3_server)
    root = f"/learnerkit-logs-{uuid.uuid4().hex[:8]}/jobs"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[Any, Scheduler]:
        from controller_sidecar.etcdstore import EtcdStore

        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        state = JobState(job_id, "team-a", "preempted", 1_800_000_000.0)
        spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": "team-a", "job_id": job_id}
        await store.create(state, spec, text, "manifest.yml")
        halted = state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, attempt=2, reason="halted by its user")
        await store.save(halted)
        scheduler = Scheduler(store, DockerBackend(), options)
        await scheduler.loop.rebuild()
        return etcd, scheduler

    etcd, scheduler = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(scheduler, tokens), log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", token, job_id)
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        sock.close()
        asyncio.run_coroutine_threadsafe(etcd.delete_prefix(root.rsplit("/", 1)[0] + "/"), loop).result(30)
        asyncio.run_coroutine_threadsafe(etcd.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def test_each_attempts_log_is_read_back_whole_or_by_range(served: Served) -> None:
    client = SchedulerClient(served.url, served.token)
    first, second = b"".join(FIRST), b"".join(SECOND)
    assert client.logs(served.job_id).data == second, "the latest attempt by default, as before"
    whole = client.logs(served.job_id, attempt=1)
    assert (whole.data, whole.next_offset, whole.finished) == (first, len(first), True)
    tail = client.logs(served.job_id, attempt=1, tail=2)
    assert tail.data == b"halt requested: checkpoint at step 20\nhalted (exit 143)\n"
    start = len(FIRST[0]) - 5  # a window across the two parts
    window = client.logs(served.job_id, attempt=1, offset=start, length=12)
    assert (window.data, window.next_offset, window.finished) == (first[start : start + 12], start + 12, False)
    with pytest.raises(ApiError, match=r"400 attempt: job \S+ has attempts 1\.\.2; got 3"):
        client.logs(served.job_id, attempt=3)


def test_job_logs_attempt_prints_the_first_attempts_halt(served: Served) -> None:
    env = {"LEARNERKIT_SCHEDULER_URL": served.url, "LEARNERKIT_TOKEN": served.token}
    result = CliRunner().invoke(cli, ["job", "logs", served.job_id, "--attempt", "1", "-f"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.encode() == b"".join(FIRST)
