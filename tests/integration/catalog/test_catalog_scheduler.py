"""`learnerkit model register JOB` against a real scheduler that has restarted: the REST API's app (uvicorn on
127.0.0.1) over a real Scheduler restored from jobs written to the real etcd as JobStore writes them, a COMPLETED
job's outputs and signed documents (the platform's real writers) in the real SeaweedFS, Debian's docker-registry
as the catalog. Nothing is deployed. The registration of a job a real learner pair ran is
tests/integration/scheduler/test_catalog_register_docker.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.cli import cli
from learnerkit.common.keyring import PublishedKey
from learnerkit.common.signing import load_public_key, public_key_path
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.catalog.modeljob import evaluated_job
from tests.integration.conftest import REPO
from tests.unit.scheduler.provenance.jobfolder import JOB
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration]


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    """team-a's: the tenant the job's provenance names."""
    other_token: str
    """team-b's."""
    queued: str
    """A job of team-a that has not run."""


def _manifest(s3: Any, bucket: str) -> str:
    return f"""\
name: mnist
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {bucket}}}
    training_results: {{container: {bucket}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


async def _create(store: JobStore, text: str, job_id: str, status: JobStatus) -> None:
    spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": "team-a", "job_id": job_id}
    state = JobState(job_id, "team-a", "mnist", 1_800_000_000.0)
    await store.create(state, spec, text, "manifest.yml")
    if status is JobStatus.COMPLETED:
        await store.save(state.evolve(status=status, stage=Stage.DONE))
    else:
        await store.save(state.evolve(not_before=4e9, reason="waiting for 1 GPU(s): 0 free"))


@pytest.fixture(scope="module")
def served(
    etcd_server: Any, s3_server: Any, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("catalog-scheduler")
    objects, key = evaluated_job(folder / "job")
    keys = [load_public_key(public_key_path(key))]
    published = [PublishedKey(keys[0].keyid, public_key_path(key).read_text(), True)]
    tokens = folder / "tokens.json"
    token, other_token = add_token(tokens, "team-a"), add_token(tokens, "team-b")
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    bucket = f"catalog-{uuid.uuid4().hex[:8]}"
    s3 = s3_server.client()
    create_bucket(s3, bucket)
    for name, data in objects.objects.items():
        s3.put_object(Bucket=bucket, Key=name, Body=data)
    queued = f"job-{uuid.uuid4().hex[:12]}"
    root = f"/learnerkit-catalog-{uuid.uuid4().hex[:8]}/jobs"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[EtcdStore, Scheduler]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        await _create(store, _manifest(s3_server, bucket), JOB, JobStatus.COMPLETED)
        await _create(store, _manifest(s3_server, bucket), queued, JobStatus.QUEUED)
        scheduler = Scheduler(store, DockerBackend(), options)
        await scheduler.loop.rebuild()
        return etcd, scheduler

    etcd, scheduler = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(scheduler, tokens, keys=published, catalog=registry)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", token, other_token, queued)
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        sock.close()
        asyncio.run_coroutine_threadsafe(etcd.delete_prefix(root.rsplit("/", 1)[0] + "/"), loop).result(30)
        asyncio.run_coroutine_threadsafe(etcd.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def _register(served: Served, token: str, job: str, name: str) -> tuple[int, Any]:
    env = {"LEARNERKIT_SCHEDULER_URL": served.url, "LEARNERKIT_TOKEN": token}
    result = CliRunner().invoke(cli, ["model", "register", job, "--name", name, "--output", "json"], env=env)
    return result.exit_code, json.loads(result.output)


def test_model_register_job_after_a_restart_names_why_and_another_tenant_gets_no_such_job(served: Served) -> None:
    name = f"digits-{uuid.uuid4().hex[:6]}"
    code, restored = _register(served, served.token, JOB, name)
    # An ended job's store credentials leave etcd: a restarted scheduler can no longer read its results.
    assert code == 1 and "deleted its store's credentials" in restored["message"], restored
    code, other = _register(served, served.other_token, JOB, name)
    assert code == 1 and f"no job {JOB!r}" in other["message"], other
    code, queued = _register(served, served.token, served.queued, name)
    assert code == 1 and "is QUEUED" in queued["message"], queued
