"""``/job`` sized to the manifest's ``storage`` on the real Docker engine: a learner writing past it fails with why,
the host holds no more than the size, and nothing of the disk (volume, loop device, backing file) outlives the job
or a crash."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit.pair import docker as pair_docker
from learnerkit.pair.jobdisk import BACKING_FILE_LABEL, JobDiskSettings, make_backing_file
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import RESULTS_BUCKET, TERMINAL, Harness, leftovers, manifest
from tests.integration.scheduler.test_docker_orphans import Crash, job_of

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

STORAGE = 64 << 20
FILL = "dd if=/dev/zero of=$RESULT_DIR/big bs=1M count=256"


def attached(path: Path) -> list[str]:
    """The loop devices attached to ``path``, even once it is deleted."""
    listing = subprocess.run(
        ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"], capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[0] for line in listing.splitlines() if str(path) in line]


def backing_files(state_dir: Path) -> list[Path]:
    return sorted(state_dir.rglob("*.ext4"))


@pytest.fixture
def disk_harness(
    etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any, tmp_path: Path
) -> Iterator[Harness]:
    made = Harness(etcd_server, service_options, backend=DockerBackend(JobDiskSettings(state_dir=tmp_path)))
    yield made
    made.kill()


def test_a_learner_writing_past_storage_fails_saying_job_is_full_and_the_disk_is_released(
    disk_harness: Harness, s3_server: Any, scheduler_buckets: Any, tmp_path: Path
) -> None:
    text = manifest(s3_server, FILL, extra=f"storage: {STORAGE // (1 << 20)}MiB\n")
    view = disk_harness.call(disk_harness.service.submit("team-a", text))
    final = disk_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "FAILED", final
    assert "/job is full (storage" in final.learners[0].message, final
    log = disk_harness.call(disk_harness.service.logs("team-a", view.job_id)).read()
    assert b"No space left on device" in log
    written = scheduler_buckets.head_object(Bucket=RESULTS_BUCKET, Key=f"{view.job_id}/attempt-1/learner-1/results/big")
    assert 0 < written["ContentLength"] <= STORAGE, "the write stopped at the volume's size"
    assert leftovers(view.job_id) == []
    assert backing_files(tmp_path) == [], "the backing file is deleted with the volume"


@pytest.mark.parametrize("learners", [1, 2])
def test_a_crash_leftover_file_is_released_at_start_and_an_orphan_sized_volume_with_its_disk(
    build_inputs: BuildInputs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, learners: int
) -> None:
    """Two learners: the job's shared volume is sized too, and goes with its disk."""
    built = build_sidecar(REPO, build_inputs, lambda line: None)
    instance = f"lk-test-{uuid.uuid4().hex[:8]}"
    job = job_of(learners, built.immutable_reference or built.reference, instance)
    job = replace(job, learners=tuple(replace(learner, storage_bytes=STORAGE) for learner in job.learners))
    backend = DockerBackend(JobDiskSettings(state_dir=tmp_path))
    crashed = tmp_path / instance / "lk-crashed-1-job.ext4"
    make_backing_file(crashed, STORAGE)  # a crash after the file, before its volume
    assert attached(crashed)

    def crash(*args: object) -> None:
        raise Crash

    monkeypatch.setattr(pair_docker, "learner_options", crash)  # after the pair's volume, before its containers
    try:
        with pytest.raises(Crash):
            backend.deploy(job)
        names = [f"{job.learners[0].name}-job"] + ([job.shared_name] if learners > 1 else [])
        volumes = [engine.engine().volumes.get(name) for name in names]
        orphans = [Path(volume.attrs["Labels"][BACKING_FILE_LABEL]) for volume in volumes]
        assert all(volume.attrs["Options"]["type"] == "ext4" for volume in volumes)
        assert all(attached(orphan) for orphan in orphans)
        assert backend.job_ids(instance) == {job.job_id}
        assert not crashed.exists() and not attached(crashed), "the file without a volume is released at start"
        assert all(orphan.exists() for orphan in orphans), "a file whose volume exists is kept"
        backend.teardown(job.job_id)
        assert leftovers(job.job_id) == [] and backing_files(tmp_path) == []
    finally:
        backend.teardown(job.job_id)
        for path in backing_files(tmp_path):
            for device in attached(path):
                subprocess.run(["losetup", "--detach", device], check=False)
