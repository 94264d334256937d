"""Learner pairs on the real engine, with the real etcd and SeaweedFS the session fixtures start."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.settings import EtcdSettings
from controller_sidecar.status import Phase, StatusRecord
from learnerkit.common import engine
from learnerkit.dev.s3 import create_bucket
from learnerkit.pair.cgroups import SIDECAR_MOUNT
from learnerkit.pair.docker import PairHandle, exit_code, remove_pair, start_pair
from learnerkit.pair.etcd import job_history, learner_metrics, learner_status
from learnerkit.pair.spec import PairSpec
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.waiting import wait_until

LEARNER_IMAGE = "learnerkit/pytorch:2.13-cpu-py3.11"
SMOKE = ("python", "/opt/learner/smoke/train.py")
DATA_BUCKET = "lk-data"
RESULTS_BUCKET = "lk-results"
PAIR_TIMEOUT_S = 300.0


@pytest.fixture(scope="session")
def sidecar_image(build_inputs: BuildInputs) -> str:
    """The sidecar image, built now unless `make images` already built these exact inputs."""
    built = build_sidecar(REPO, build_inputs, lambda line: None)
    return built.immutable_reference or built.reference


@pytest.fixture(scope="session")
def learner_image(docker_client: Any) -> str:
    if engine.image_id(LEARNER_IMAGE) is None:
        pytest.fail(f"{LEARNER_IMAGE} is not built: run `make images`")
    return LEARNER_IMAGE


@pytest.fixture(scope="session")
def s3_client(s3_server: Any) -> Any:
    client = s3_server.client()
    for bucket in (DATA_BUCKET, RESULTS_BUCKET):
        create_bucket(client, bucket)
    return client


@dataclass
class Pairs:
    """Makes learner pairs against the session's servers and removes every one it made."""

    etcd: Any
    s3: Any
    s3_client: Any
    learner_image: str
    sidecar_image: str
    made: list[PairHandle] = field(default_factory=list)

    @property
    def etcd_settings(self) -> EtcdSettings:
        return self.etcd.settings()

    def spec(
        self,
        command: tuple[str, ...] | str,
        *,
        job_id: str | None = None,
        data_prefix: str | None = "smoke/",
        config: dict[str, Any] | None = None,
        learner_env: dict[str, str] | None = None,
        memory_bytes: int | None = None,
        halt_grace_s: float = 20.0,
    ) -> PairSpec:
        job_id = job_id or f"t-{uuid.uuid4().hex[:10]}"
        document: dict[str, Any] = {
            "results": {"bucket": RESULTS_BUCKET, "prefix": f"{job_id}/learner-1/"},
            "data": {"mode": "copy", "bucket": DATA_BUCKET, "prefix": data_prefix}
            if data_prefix is not None
            else {"mode": "mount"},
            "timing": {"halt_grace_s": halt_grace_s, "log_ship_interval_s": 1.0, "poll_interval_s": 0.05},
            "metrics_port": 0,
            **(config or {}),
        }
        return PairSpec(
            job_id=job_id,
            learner_id=1,
            learner_image=self.learner_image,
            sidecar_image=self.sidecar_image,
            command=command,
            sidecar_config=document,
            endpoints=Endpoints(
                etcd_endpoints=self.etcd.endpoint,
                s3_endpoint_url=self.s3.endpoint_url,
                s3_access_key=self.s3.access_key,
                s3_secret_key=self.s3.secret_key,
            ),
            learner_env=learner_env or {},
            memory_bytes=memory_bytes,
            halt_grace_s=halt_grace_s,
        )

    def start(self, spec: PairSpec) -> PairHandle:
        handle = start_pair(spec)
        self.made.append(handle)
        return handle

    def status(self, job_id: str) -> StatusRecord | None:
        return learner_status(self.etcd_settings, job_id, 1)

    def metrics(self, job_id: str) -> dict[str, object]:
        return learner_metrics(self.etcd_settings, job_id, 1)

    def history(self, job_id: str) -> list[StatusRecord]:
        return job_history(self.etcd_settings, job_id)

    def wait_terminal(self, handle: PairHandle, job_id: str, timeout: float = PAIR_TIMEOUT_S) -> StatusRecord:
        def terminal() -> StatusRecord | None:
            status = self.status(job_id)
            return status if status is not None and status.phase.terminal else None

        record = wait_until(terminal, timeout=timeout, interval=0.2, message=lambda: self.describe(handle, job_id))
        wait_until(lambda: exit_code(handle.sidecar) is not None, timeout=60, message="the sidecar to exit")
        return record

    def wait_phase(self, job_id: str, phase: Phase, timeout: float = PAIR_TIMEOUT_S) -> StatusRecord:
        def reached() -> StatusRecord | None:
            status = self.status(job_id)
            return status if status is not None and status.phase == phase else None

        return wait_until(reached, timeout=timeout, interval=0.1, message=f"{job_id} to reach {phase}")

    def describe(self, handle: PairHandle, job_id: str) -> str:
        """Evidence for a failed wait: the statuses so far and both containers' last output."""
        parts = [f"{job_id} statuses: {[(r.phase.value, r.message) for r in self.history(job_id)]}"]
        for role, container_id in (("sidecar", handle.sidecar), ("learner", handle.learner)):
            try:
                logs = engine.engine().containers.get(container_id).logs(tail=30).decode("utf-8", "replace")
            except docker.errors.DockerException as e:
                logs = f"<{e}>"
            parts.append(f"--- {role}:\n{logs}")
        parts.append(watched_cgroups(handle))
        return "\n".join(parts)

    def objects(self, prefix: str) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        paginator = self.s3_client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=RESULTS_BUCKET, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = self.s3_client.get_object(Bucket=RESULTS_BUCKET, Key=item["Key"])["Body"].read()
        return found

    def stored(self, job_id: str, relative: str) -> bytes:
        """One object of the job's learner 1 outputs, e.g. ``results/summary.json``."""
        key = f"{job_id}/learner-1/{relative}"
        return bytes(self.s3_client.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())

    def shipped_log(self, job_id: str) -> bytes:
        parts = self.objects(f"{job_id}/learner-1/logs/learner.log.part-")
        return b"".join(parts[key] for key in sorted(parts))


@pytest.fixture(scope="session")
def smoke_data(s3_client: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The smoke dataset under s3://lk-data/smoke/."""
    path = write_smoke_dataset(tmp_path_factory.mktemp("smoke"))
    s3_client.upload_file(str(path), DATA_BUCKET, "smoke/train.csv")
    return "smoke/"


@pytest.fixture
def pairs(
    etcd_server: Any, s3_server: Any, s3_client: Any, learner_image: str, sidecar_image: str, smoke_data: str
) -> Iterator[Pairs]:
    made = Pairs(etcd_server, s3_server, s3_client, learner_image, sidecar_image)
    yield made
    for handle in made.made:
        remove_pair(handle)


def watched_cgroups(handle: PairHandle) -> str:
    """The learner's state as the engine tells it, and each cgroup folder of its mounted into the sidecar as this
    host sees it: where a sidecar did not see its learner end, this says what it was looking at."""
    client = engine.engine()
    try:
        state = client.containers.get(handle.learner).attrs["State"]
        mounts = client.containers.get(handle.sidecar).attrs["Mounts"]
    except docker.errors.DockerException as e:
        return f"--- cgroups: <{e}>"
    lines = [f"--- learner state: { {k: state.get(k) for k in ('Status', 'Pid', 'ExitCode', 'FinishedAt')} }"]
    for mount in mounts:
        if not str(mount.get("Destination", "")).startswith(SIDECAR_MOUNT):
            continue
        source = Path(mount["Source"])
        seen = {name: _read(source / name) for name in ("pids.current", "cgroup.procs", "cgroup.events")}
        lines.append(f"{mount['Destination']} <- {source} (exists: {source.is_dir()}): {seen}")
    return "\n".join(lines)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        return f"<{e.strerror}>"
