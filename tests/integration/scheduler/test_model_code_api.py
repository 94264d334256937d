"""`learnerkit job submit MANIFEST MODEL` end to end: the CLI, the real REST API (uvicorn on 127.0.0.1) over the
real Scheduler, etcd, SeaweedFS and a learner pair on Docker; and a model the scheduler refuses after its
parts were already stored, over HTTP, leaving nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import zipfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.requirements import PackageIndex
from learnerkit.cli import cli
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.config.settings import LimitSettings
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.errors import ApiError
from learnerkit.scheduler.jobs.store import JobStore
from tests.integration.scheduler.conftest import TERMINAL, leftovers, manifest
from tests.integration.scheduler.test_model_code import model_folder, model_objects, stored
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]


@dataclass(frozen=True)
class Api:
    url: str
    token: str


@pytest.fixture
def api_limits() -> LimitSettings:
    """The API's limits; a test parametrizes ``api_limits`` for others."""
    return LimitSettings(max_model_bytes=64 << 20)


@pytest.fixture
def api(
    etcd_server: Any,
    service_options: SchedulerOptions,
    scheduler_buckets: Any,
    tmp_path: Path,
    api_limits: LimitSettings,
) -> Iterator[Api]:
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "team-a")
    store = JobStore()
    options = replace(service_options, packages=PackageIndex(index_url="http://127.0.0.1:9/simple"))
    scheduler = Scheduler(store, DockerBackend(), options)

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        etcd = await EtcdStore.connect(etcd_server.settings())
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

    app = create_app(scheduler, tokens, limits=api_limits, lifespan=lifespan)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=60, message="the API to start")
    yield Api(f"http://127.0.0.1:{sock.getsockname()[1]}", token)
    server.should_exit = True
    thread.join(timeout=60)
    sock.close()


def cli_json(api: Api, *args: str) -> tuple[int, Any]:
    env = {"LEARNERKIT_SCHEDULER_URL": api.url, "LEARNERKIT_TOKEN": api.token}
    result = CliRunner().invoke(cli, ["job", *args, "-o", "json"], env=env)
    return result.exit_code, json.loads(result.output) if result.output.strip() else None


def test_job_submit_with_a_folder_runs_it_from_model_dir(
    api: Api, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    folder = model_folder(tmp_path, None)
    path = tmp_path / "manifest.yml"
    path.write_text(manifest(s3_server, "python3 train.py --arg cli http://127.0.0.1:9/"))
    code, job = cli_json(api, "submit", str(path), str(folder), "--image", learner_image)
    assert code == 0, job
    client = SchedulerClient(api.url, api.token)
    final = wait_until(
        lambda: (view := client.get(job["job_id"])).status in TERMINAL and view,
        timeout=300,
        interval=0.5,
        message=f"{job['job_id']} to end",
    )
    assert final.status == "COMPLETED", final
    out = json.loads(stored(scheduler_buckets, f"{final.job_id}/attempt-1/learner-1/results/out.json"))
    assert (out["cwd"], out["argv"][:2], out["word"]) == ("/job/model", ["--arg", "cli"], "from the model code")
    assert leftovers(final.job_id) == []


WEIGHTS = None
"""A member of 20 MB of random bytes: its parts are in the store before the zip's end arrives."""


@pytest.mark.parametrize(
    ("members", "refusal"),
    [
        # The directory comes last: the scheduler finds the member that escapes after 20 MB were stored.
        ([("weights.bin", WEIGHTS), ("../escape.py", "x")], r"400 model: member '\.\./escape\.py'"),
        # No copy of the model is kept: requirements.txt, 20 MB before the end the scheduler keeps, is read from
        # the stretch kept as it passed, and its URL line is refused as `job validate` refuses it.
        (
            [("requirements.txt", "lkgreet==1.0\nhttps://example.invalid/evil.whl\n"), ("weights.bin", WEIGHTS)],
            r"400 model: requirements\.txt line 2: .*URLs are not allowed",
        ),
    ],
    ids=["escaping-member-last", "bad-requirements-first"],
)
def test_a_model_refused_after_its_parts_were_stored_leaves_nothing(
    api: Api,
    s3_server: Any,
    scheduler_buckets: Any,
    tmp_path: Path,
    members: list[tuple[str, str | None]],
    refusal: str,
) -> None:
    """The upload is dropped and no job is recorded."""
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, content in members:
            zf.writestr(name, os.urandom(20 << 20) if content is None else content)
    client = SchedulerClient(api.url, api.token, timeout_s=120)
    jobs_before, objects_before = client.list_jobs(), model_objects(scheduler_buckets)
    with pytest.raises(ApiError, match=refusal):
        client.submit(manifest(s3_server, "true"), model=archive)
    assert client.list_jobs() == jobs_before
    assert model_objects(scheduler_buckets) == objects_before


@pytest.mark.parametrize("api_limits", [LimitSettings(max_model_bytes=64 << 20, upload_idle_s=1.0)])
def test_a_model_upload_that_goes_quiet_is_aborted(api: Api, s3_server: Any, scheduler_buckets: Any) -> None:
    """D7: a client that stops sending its model gets 408 at the idle timeout, and the parts already stored
    are dropped with the multipart upload."""
    client = SchedulerClient(api.url, api.token, timeout_s=120)
    jobs_before, objects_before = client.list_jobs(), model_objects(scheduler_buckets)
    boundary = "b0undary"
    start = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="manifest"\r\n\r\n{manifest(s3_server, "true")}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.zip"\r\n\r\n'
    ).encode() + os.urandom(12 << 20)  # two parts' worth: the multipart upload has begun
    host, port = api.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.token}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(start) + 1000}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        conn.sendall(head + start)  # then nothing: 1000 bytes are still owed
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and answer.rstrip().endswith(b"}"):
                break
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert client.list_jobs() == jobs_before
    assert model_objects(scheduler_buckets) == objects_before
