"""The tenant <-> scheduler boundary against the real etcd, SeaweedFS and Docker engine (docs/security.md):
refused jobs leave nothing behind, a cancel always stops what a deploy made, a scheduler sweeps only its own
containers, and a restart reads any amount of history."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from learnerkit.common import engine
from learnerkit.pair.docker import JOB_LABEL
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.docker import local_gpus
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.errors import ManifestError, ManifestTooLargeError, StoreUnavailableError
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.images.gate import ImageGate
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import DATA_BUCKET, TERMINAL, Harness, leftovers, manifest
from tests.waiting import stays_true, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

HUGE = 10**20


def stored_job_ids(harness: Harness) -> set[str]:
    found = harness.call(harness.service.shared.store.etcd.get_prefix(f"{harness.root}/"))
    return {key.split("/")[-2] for key in found if key.endswith("/spec")}


def stays_empty(job_id: str, seconds: float) -> None:
    """Nothing of the job appears on the engine for a while (a deploy still running would make some)."""
    stays_true(lambda: leftovers(job_id) == [], seconds, message=f"{job_id} has no containers after it was cancelled")


def test_a_refused_submit_stores_nothing(harness: Harness, s3_server: Any) -> None:
    before = stored_job_ids(harness)
    with pytest.raises(ManifestError, match="learners"):
        harness.call(harness.service.submit("team-a", manifest(s3_server, "true", learners=HUGE)))
    assert stored_job_ids(harness) == before


@pytest.mark.parametrize("auth_url", ["http://127.0.0.1:22", "http://169.254.169.254"])
def test_an_object_store_outside_the_allowlist_is_refused_by_field(
    harness: Harness, s3_server: Any, auth_url: str
) -> None:
    job = manifest(s3_server, "true").replace(f"auth_url: {s3_server.endpoint_url}", f"auth_url: {auth_url}")
    before = stored_job_ids(harness)
    with pytest.raises(ManifestError, match=r"data_stores\[0\]\.connection\.auth_url: .* is not an object store"):
        harness.call(harness.service.submit("team-a", job))
    assert stored_job_ids(harness) == before


def test_a_manifest_over_the_size_limit_is_refused_and_stores_nothing(harness: Harness, s3_server: Any) -> None:
    # 0.8 MiB: under the old 1 MiB limit, but spec and credentials together passed etcd's request limit (a 500).
    job = manifest(s3_server, "true").replace("description: a scheduler test", "description: " + "x" * 800_000)
    before = stored_job_ids(harness)
    with pytest.raises(ManifestTooLargeError, match="at most 262144"):
        harness.call(harness.service.submit("team-a", job))
    assert stored_job_ids(harness) == before


def test_a_submit_while_etcd_is_down_is_unavailable_not_a_failure(
    harness: Harness, s3_server: Any, etcd_server: Any
) -> None:
    etcd_server.stop()
    try:
        with pytest.raises(StoreUnavailableError, match="does not answer"):
            harness.call(harness.service.submit("team-a", manifest(s3_server, "true")))
    finally:
        etcd_server.start()

    def accepted() -> str | None:
        try:
            return harness.call(harness.service.submit("team-a", manifest(s3_server, "true"))).job_id
        except StoreUnavailableError:
            return None

    job_id = wait_until(accepted, timeout=60, interval=0.5, message="a submit once etcd is back")
    assert harness.wait_status("team-a", job_id, {"COMPLETED", "FAILED"}).status == "COMPLETED"


def test_a_restart_reads_more_history_than_one_etcd_answer_holds(
    etcd_server: Any, service_options: SchedulerOptions, s3_server: Any, scheduler_buckets: Any
) -> None:
    # 30 finished jobs whose manifests (kept with their credentials) and history pass 4 MiB twice over.
    root = f"/learnerkit-big-{uuid.uuid4().hex[:8]}/jobs"
    text = manifest(s3_server, "true").replace("description: a scheduler test", "description: " + "x" * 200_000)
    states = [
        JobState(
            f"job-big-{n:02d}-{uuid.uuid4().hex[:6]}", "team-a", "big", time.time() + n, JobStatus.COMPLETED, Stage.DONE
        )
        for n in range(30)
    ]

    async def arrange(create: bool) -> None:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        for state in states:
            if create:
                assert await store.create(state, {"job_id": state.job_id}, text, "manifest.yml")
                await etcd.put(keys.history_key(state.job_id, "job-0000000002", root), "h" * 150_000)
            else:
                await store.delete(state.job_id)
        await etcd.close()

    asyncio.run(arrange(create=True))
    try:
        started = Harness(etcd_server, service_options, root=root)
        try:
            listed = started.call(started.service.list_jobs("team-a"))
            assert [job.job_id for job in listed] == [state.job_id for state in states]
        finally:
            started.kill()
    finally:
        asyncio.run(arrange(create=False))


def test_a_finished_job_keeps_only_its_spec_final_status_and_attempts(harness: Harness, s3_server: Any) -> None:
    view = harness.call(harness.service.submit("team-a", manifest(s3_server, "true")))
    assert harness.wait_status("team-a", view.job_id, TERMINAL).status == "COMPLETED"
    prefix = keys.job_prefix(view.job_id)
    kept = ["attempts/1", "spec", "status"]

    def left() -> list[str]:
        found = harness.call(harness.service.shared.store.etcd.get_prefix(prefix))
        return sorted(key.removeprefix(prefix).lstrip("/") for key in found)

    # The trim follows the final status (a sidecar's last status keys go with it): wait for it, never past it.
    wait_until(lambda: left() == kept, timeout=30, message=lambda: f"the job trimmed to {kept}: {left()}")
    assert harness.call(harness.service.get("team-a", view.job_id)).results.endswith(f"/{view.job_id}/attempt-1/")


def test_only_images_that_passed_the_gates_or_are_trusted_run(
    etcd_server: Any,
    service_options: SchedulerOptions,
    s3_server: Any,
    scheduler_buckets: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path))  # no test or scan record on this host
    catalog = ImageCatalog(REPO)
    gated = replace(service_options, resolve_image=ImageGate().gated(catalog.resolve))
    harness = Harness(etcd_server, gated)
    try:
        with pytest.raises(ManifestError, match=r"framework\.version: image learnerkit/pytorch:.* was never tested"):
            harness.call(harness.service.submit("team-a", manifest(s3_server, "true")))
    finally:
        harness.kill()
    trusted = replace(service_options, resolve_image=ImageGate(trusted=catalog.references()).gated(catalog.resolve))
    harness = Harness(etcd_server, trusted)
    try:
        view = harness.call(harness.service.submit("team-a", manifest(s3_server, "true")))
        assert harness.wait_status("team-a", view.job_id, TERMINAL).status == "COMPLETED"
    finally:
        harness.kill()


def host_data_job(s3_server: Any, folder: Path, command: str) -> str:
    """The test job with its training data in a host folder (FfDL's mount_volume) and results in S3."""
    job = manifest(s3_server, command).replace(f"    training_data:\n      container: {DATA_BUCKET}/smoke\n", "")
    host = (
        "  - id: host\n    type: mount_volume\n    training_data:\n      container: "
        f"{folder.name}\n    connection:\n      type: host_mount\n      path: {folder.parent}\n"
    )
    return job.replace("data_stores:\n", "data_stores:\n" + host)


def test_a_host_folder_is_refused_unless_allowed_then_mounted_read_only(
    etcd_server: Any, service_options: SchedulerOptions, s3_server: Any, scheduler_buckets: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "datasets" / "mnist"
    folder.mkdir(parents=True)
    (folder / "hello.txt").write_text("hello from the host\n")
    for path in (tmp_path, folder.parent, folder):
        path.chmod(0o755)
    (folder / "hello.txt").chmod(0o644)
    job = host_data_job(s3_server, folder, 'cat "$DATA_DIR/hello.txt" && ! touch "$DATA_DIR/written"')
    harness = Harness(etcd_server, service_options)
    try:
        with pytest.raises(ManifestError, match=r"data_stores\[0\]\.connection\.path: host mounts are off"):
            harness.call(harness.service.submit("team-a", job))
    finally:
        harness.kill()
    policy = replace(service_options.submit_policy, host_paths=(str(folder.parent),))
    harness = Harness(etcd_server, replace(service_options, submit_policy=policy))
    try:
        outside = host_data_job(s3_server, tmp_path, "true")
        with pytest.raises(ManifestError, match="is not under a host folder this scheduler allows"):
            harness.call(harness.service.submit("team-a", outside))
        view = harness.call(harness.service.submit("team-a", job))
        final = harness.wait_status("team-a", view.job_id, TERMINAL)
        assert final.status == "COMPLETED", final
        assert b"hello from the host" in harness.call(harness.service.logs("team-a", view.job_id)).read()
        assert not (folder / "written").exists()
    finally:
        harness.kill()


def test_gpus_without_a_gpu_type_ask_for_any_gpu(harness: Harness, s3_server: Any, etcd_server: Any) -> None:
    job = manifest(s3_server, "true").replace("gpus: 0", "gpus: 1")
    view = harness.call(harness.service.submit("team-a", job))
    if local_gpus()[0]:
        assert view.status == "QUEUED", view
        harness.call(harness.service.cancel("team-a", view.job_id))
    else:
        assert (view.status, view.reason) == ("FAILED", "unschedulable: no node has GPUs of any type")
    harness.kill()
    again = Harness(etcd_server, harness.options)
    try:
        assert again.call(again.service.get("team-a", view.job_id)).status in ("FAILED", "CANCELLED")
    finally:
        again.kill()


def test_a_stored_job_that_cannot_be_admitted_fails_at_the_restart(
    etcd_server: Any, service_options: SchedulerOptions, s3_server: Any, scheduler_buckets: Any
) -> None:
    # A record as an older scheduler stored it: queued, with more learners than any limit allows.
    text = manifest(s3_server, "true", learners=HUGE)
    state = JobState(f"job-unadmittable-{int(time.time())}", "team-a", "test-job", time.time())

    async def arrange(create: bool) -> None:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd)
        if create:
            assert await store.create(state, {"job_id": state.job_id, "tenant": state.tenant}, text, "manifest.yml")
        else:
            await store.delete(state.job_id)
        await etcd.close()

    asyncio.run(arrange(create=True))
    try:
        started = Harness(etcd_server, service_options)
        try:
            stored = started.call(started.service.shared.store.etcd.get(f"/learnerkit/jobs/{state.job_id}/status"))
            assert stored is not None
            status = json.loads(stored[0])
            assert status["status"] == "FAILED" and "learners" in status["reason"], status
        finally:
            started.kill()
    finally:
        asyncio.run(arrange(create=False))


def test_cancel_during_deploy_leaves_nothing_running(harness: Harness, s3_server: Any) -> None:
    for _ in range(3):
        view = harness.call(harness.service.submit("team-a", manifest(s3_server, "sleep 300", learners=3, cpus=0.2)))
        wait_until(
            lambda job_id=view.job_id: harness.call(harness.service.get("team-a", job_id)).reason == "deploying",
            timeout=120,
            interval=0.01,
            message="the deploy to begin",
        )
        cancelled = harness.call(harness.service.cancel("team-a", view.job_id))
        assert cancelled.status == "CANCELLED"
        stays_empty(view.job_id, 5)
        assert harness.call(harness.service.get("team-a", view.job_id)).status == "CANCELLED"


def test_a_starting_scheduler_leaves_other_schedulers_jobs_running(
    harness: Harness, s3_server: Any, etcd_server: Any
) -> None:
    view = harness.call(harness.service.submit("team-a", manifest(s3_server, "sleep 300")))
    harness.wait_status("team-a", view.job_id, {"PROCESSING"})
    learner = engine.engine().containers.list(filters={"label": f"{JOB_LABEL}={view.job_id}"})[0]
    other = Harness(etcd_server, harness.options, root="/learnerkit-other-scheduler/jobs")
    try:
        learner.reload()
        assert learner.status == "running", "another scheduler removed this scheduler's job"
    finally:
        other.kill()
    harness.call(harness.service.cancel("team-a", view.job_id))
    assert leftovers(view.job_id) == []
