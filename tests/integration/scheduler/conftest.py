"""The scheduler service against the real etcd, SeaweedFS and Docker engine, its loop on a thread of its own."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from learnerkit.common import engine
from learnerkit.dev.s3 import create_bucket
from learnerkit.pair.docker import JOB_LABEL
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.backends.protocol import Backend
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit_build.builds.images import build_image
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.waiting import wait_until

T = TypeVar("T")
DATA_BUCKET = "sched-data"
RESULTS_BUCKET = "sched-results"
TERMINAL = {"COMPLETED", "FAILED", "HALTED", "CANCELLED"}


class Harness:
    """A Scheduler whose asyncio loop runs on a thread; tests call it synchronously."""

    def __init__(
        self, etcd: Any, options: SchedulerOptions, root: str = keys.ROOT, backend: Backend | None = None
    ) -> None:
        self.etcd_server = etcd
        self.options = options
        self.root = root
        self.backend = backend or DockerBackend()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stop_event: asyncio.Event | None = None
        self.runner: Future[None] | None = None
        self.service = self.call(self._make())

    async def _make(self) -> Scheduler:
        etcd = await EtcdStore.connect(self.etcd_server.settings())
        service = Scheduler(JobStore(etcd, self.root), self.backend, self.options)
        await service.loop.rebuild()
        self.stop_event = asyncio.Event()
        self.runner = asyncio.run_coroutine_threadsafe(service.loop.run(self.stop_event), self.loop)
        return service

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def kill(self) -> None:
        """Stop the loop as a killed process would: nothing is cleaned up, nothing is torn down."""
        if not self.thread.is_alive():
            return
        if self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        if self.runner is not None:
            self.runner.result(timeout=60)
        self.call(self.service.shared.store.etcd.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    def wait_status(self, tenant: str, job_id: str, statuses: set[str], timeout: float = 300) -> JobView:
        def reached() -> JobView | None:
            view = self.call(self.service.get(tenant, job_id))
            return view if view.status in statuses else None

        return wait_until(
            reached,
            timeout=timeout,
            interval=0.2,
            message=lambda: f"{job_id} to reach {statuses}: {self.call(self.service.get(tenant, job_id))}",
        )


GATE = "/tmp/learnerkit-test-gate"
HELD = f"n=0; until [ -e {GATE} ] || [ $n -ge 1200 ]; do sleep 0.5; n=$((n + 1)); done"
"""A learner command that runs until the test makes `GATE` in the learner's /tmp (10 minutes at most, should the
test fail first): a fixed sleep races the test on a busy machine, where the steps before it may take longer."""


def manifest(
    s3: Any, command: str, *, data: str = "smoke", learners: int = 1, extra: str = "", cpus: float = 0.5
) -> str:
    return textwrap.dedent(
        f"""\
        name: test-job
        description: a scheduler test
        version: "1.0"
        cpus: {cpus}
        gpus: 0
        memory: 1Gb
        learners: {learners}
        data_stores:
          - id: store
            type: s3_datastore
            training_data:
              container: {DATA_BUCKET}/{data}
            training_results:
              container: {RESULTS_BUCKET}
            connection:
              auth_url: {s3.endpoint_url}
              user_name: {s3.access_key}
              password: {s3.secret_key}
        framework:
          name: pytorch
          version: "2.13"
          command: {json.dumps(command)}
        """
    ) + textwrap.dedent(extra)


async def chunks(path: Path) -> AsyncIterator[bytes]:
    """A model archive as a submit takes it."""
    yield path.read_bytes()


@pytest.fixture(scope="session")
def scheduler_buckets(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    client = s3_server.client()
    for bucket in (DATA_BUCKET, RESULTS_BUCKET):
        create_bucket(client, bucket)
    client.upload_file(str(write_smoke_dataset(tmp_path_factory.mktemp("smoke"))), DATA_BUCKET, "smoke/train.csv")
    return client


@pytest.fixture(scope="session")
def service_options(etcd_server: Any, s3_server: Any, build_inputs: BuildInputs) -> SchedulerOptions:
    catalog = ImageCatalog(REPO)
    sidecar = build_sidecar(REPO, build_inputs, lambda line: None)
    return SchedulerOptions(
        platform=Platform(
            etcd_endpoints=etcd_server.endpoint,
            sidecar_image=sidecar.immutable_reference or sidecar.reference,
        ),
        catalog=catalog.frameworks(),
        resolve_image=catalog.resolve,
        policy=AdmissionPolicy(ready_timeout_s=120),
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
        attempt_figures=True,
    )


@pytest.fixture
def harness(etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any) -> Iterator[Harness]:
    made = Harness(etcd_server, service_options)
    yield made
    made.kill()


def leftovers(job_id: str) -> list[str]:
    """Everything of the job still on the engine: containers, volumes, networks."""
    client = engine.engine()
    # The engine's own listing, not one inspect per container: a container removed meanwhile is no error.
    listed = client.api.containers(all=True, filters={"label": f"{JOB_LABEL}={job_id}"})
    found = [str(c["Names"][0]).lstrip("/") for c in listed]
    found += [v.name for v in client.volumes.list(filters={"label": f"{JOB_LABEL}={job_id}"})]
    found += [n.name for n in client.networks.list(names=[f"lk-{job_id}-net"])]
    return found


@pytest.fixture(scope="session")
def learner_image(build_inputs: BuildInputs) -> str:
    """This tree's PyTorch CPU image by its content tag: learner-run as checked out here, whoever else
    moves the version tag meanwhile (``job submit --image`` names it)."""
    [image] = [i for i in load_matrix(REPO).images if i.framework.name == "pytorch" and i.variant.accelerator == "cpu"]
    built = build_image(REPO, image, build_inputs, lambda line: None)
    assert built.immutable_reference is not None, built
    return built.immutable_reference
