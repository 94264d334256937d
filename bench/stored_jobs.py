"""What bench/job_list.py and bench/scheduler_scale.py share: many jobs of one tenant written to the real etcd as
JobStore writes them, and the real Scheduler on the Docker backend over them, served by a child process on an
inherited socket (serving.py). Nothing is deployed: the manifest's object store is unreachable and the queued jobs
wait out a backoff."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from serving import REPO, serve_scheduler, start_api

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.dev.etcd import EtcdServer
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.config.policy import SubmitPolicy
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest

TENANT = "bench"
S3 = "http://127.0.0.1:9"
"""Nothing listens there: no job of these benchmarks reaches its data."""

Then = Callable[[int, JobState, JobStore, EtcdStore], Awaitable[None]]
"""What becomes of job number ``i`` once created (its state as created): halted, queued behind a backoff, running."""


def manifest(name: str) -> str:
    return f"""\
name: {name}
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "{S3}", user_name: "key", password: "secret"}}
framework:
  name: pytorch
  version: "2.13"
  command: "true"
"""


def options(etcd_endpoint: str) -> SchedulerOptions:
    return SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(S3,)),
    )


async def write_jobs(etcd_endpoint: str, count: int, name: Callable[[int], str], then: Then, *, batch: int) -> None:
    """Jobs ``job-000000000000`` on, ``batch`` at a time, submitted a few seconds apart in the past."""
    text = manifest("bench")
    etcd = await EtcdStore.connect(EtcdSettings(endpoints=(etcd_endpoint,)))
    store = JobStore(etcd)
    spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": TENANT}
    now = time.time()

    async def one(i: int) -> None:
        job_id = f"job-{i:012d}"
        state = JobState(job_id, TENANT, name(i), now - 100_000 + i * 7)
        await store.create(state, {**spec, "job_id": job_id}, text, "manifest.yml")
        await then(i, state, store, etcd)

    for start in range(0, count, batch):
        await asyncio.gather(*(one(i) for i in range(start, min(start + batch, count))))
    await etcd.close()


def serve(etcd_endpoint: str, tokens: Path, fd: int) -> None:
    """The child: the real API over the real Scheduler on the Docker backend, its loop running."""
    from learnerkit.scheduler.backends.docker import DockerBackend
    from learnerkit.scheduler.core.scheduler import Scheduler

    store = JobStore()
    scheduler = Scheduler(store, DockerBackend(), options(etcd_endpoint))
    serve_scheduler(scheduler, store, etcd_endpoint, tokens, fd)


@dataclass(frozen=True)
class StoredJobs:
    """A fresh etcd on loopback for the jobs, and the tokens file of :data:`TENANT` with its token."""

    etcd_endpoint: str
    tokens: Path
    token: str


@contextmanager
def fresh_etcd(prefix: str) -> Iterator[StoredJobs]:
    """:class:`StoredJobs` in a temporary folder named with ``prefix``; etcd stopped and the folder removed at the
    end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        etcd = EtcdServer("/usr/bin/etcd", Path(tmp) / "etcd" / "data")
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, TENANT)
        etcd.start()
        try:
            yield StoredJobs(etcd.endpoint, tokens, token)
        finally:
            etcd.stop()


@contextmanager
def api_child(
    script: str, jobs: StoredJobs, timeout_s: float
) -> Iterator[tuple[SchedulerClient, subprocess.Popen[bytes]]]:
    """``script --serve ETCD TOKENS FD`` (which calls :func:`serve`) started, and a client of it for :data:`TENANT`;
    the child terminated at the end."""
    child, port = start_api([sys.executable, script, "--serve", jobs.etcd_endpoint, str(jobs.tokens)])
    try:
        yield SchedulerClient(f"http://127.0.0.1:{port}", jobs.token, timeout_s=timeout_s), child
    finally:
        child.terminate()
        child.wait(30)
