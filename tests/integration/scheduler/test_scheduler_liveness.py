"""A lapsed lease is a blip, not a loss; a pair that is gone is a loss, even one that vanished while the scheduler
was down. On the Docker backend, with real pairs, etcd and S3 (docs/scheduler.md, "When a learner is lost")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.common import engine
from learnerkit.pair.docker import JOB_LABEL, ROLE_LABEL, pairs_of, remove_pair
from learnerkit.scheduler.jobs.store import JobStore
from tests.integration.scheduler.conftest import GATE, HELD, TERMINAL, Harness, leftovers, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]


def lease_missing_for(harness: Harness, job_id: str, learner_id: int) -> float:
    """How long the scheduler has seen the learner's lease missing (0 while it holds one)."""
    since = harness.service.shared.jobs[job_id].missing_since.get(learner_id)
    return 0.0 if since is None else harness.service.shared.clock.monotonic() - since


async def leases(harness: Harness, job_id: str) -> set[int]:
    """The learners of the job whose sidecar holds its lease, read from etcd without a scheduler."""
    etcd = await EtcdStore.connect(harness.etcd_server.settings())
    try:
        _, alive, _ = await JobStore(etcd, harness.root).learner_records(job_id)
        return alive
    finally:
        await etcd.close()


REGRANTED = "expired; granting a new one"
"""What the sidecar logs when it finds its lease gone and takes a new one."""


def container_of(job_id: str, role: str) -> Any:
    """The job's one running container of `role` (learner or sidecar)."""
    filters = {"label": [f"{JOB_LABEL}={job_id}", f"{ROLE_LABEL}={role}"]}
    [container] = engine.engine().containers.list(filters=filters)
    return container


@contextmanager
def frozen_sidecar(job_id: str) -> Iterator[None]:
    """The job's sidecar frozen (docker pause): it cannot renew its lease while its learner goes on."""
    sidecar = container_of(job_id, "sidecar")
    sidecar.pause()
    try:
        yield
    finally:
        sidecar.unpause()


def test_a_sidecar_frozen_past_its_lease_keeps_its_running_job(
    harness: Harness, s3_server: Any, scheduler_buckets: Any
) -> None:
    job = harness.call(harness.service.submit("team-a", manifest(s3_server, "sleep 20", cpus=1)))
    harness.wait_status("team-a", job.job_id, {"PROCESSING"})
    ttl = harness.options.lease_ttl_s
    with frozen_sidecar(job.job_id):
        wait_until(
            lambda: lease_missing_for(harness, job.job_id, 1) > 2 * ttl + 1,
            timeout=10 * ttl,
            interval=0.2,
            message="the scheduler to see the frozen sidecar's lease missing for twice its TTL",
        )
        assert harness.call(harness.service.get("team-a", job.job_id)).status == "PROCESSING"
    final = harness.wait_status("team-a", job.job_id, TERMINAL)
    assert (final.status, final.reason) == ("COMPLETED", ""), final


def test_etcd_paused_past_the_lease_ttl_keeps_the_running_job(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, etcd_server: Any
) -> None:
    """etcd frozen (SIGSTOP) past the lease's TTL: when it answers again the lease is revoked, the sidecar grants
    itself a new one, and its job ends COMPLETED, never "learner lost" (the k8s tier's test, on Docker)."""
    job = harness.call(harness.service.submit("team-a", manifest(s3_server, HELD, cpus=1)))
    harness.wait_status("team-a", job.job_id, {"PROCESSING"})
    ttl = harness.options.lease_ttl_s
    with etcd_server.paused():
        frozen_at = time.monotonic()
        # What is awaited here is the TTL itself running out: no event can say so while etcd is frozen.
        wait_until(
            lambda: time.monotonic() - frozen_at > ttl + 3,
            timeout=10 * ttl,
            interval=0.5,
            message="the lease's TTL to pass with etcd frozen",
        )
    sidecar = container_of(job.job_id, "sidecar")
    wait_until(
        lambda: REGRANTED in sidecar.logs().decode(errors="replace"),
        timeout=60,
        interval=0.5,
        message="the sidecar to find its lease revoked and grant a new one (the blip happened)",
    )
    learner = container_of(job.job_id, "learner")
    assert learner.status == "running", "the learner still runs"
    assert harness.call(harness.service.get("team-a", job.job_id)).status == "PROCESSING"
    assert learner.exec_run(["sh", "-c", f": > {GATE}"]).exit_code == 0
    final = harness.wait_status("team-a", job.job_id, TERMINAL)
    assert (final.status, final.reason) == ("COMPLETED", ""), final


def test_a_pair_gone_while_the_scheduler_was_down_fails_its_job_and_frees_its_room(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, etcd_server: Any
) -> None:
    running = harness.call(harness.service.submit("team-a", manifest(s3_server, "sleep 600", cpus=1.5)))
    harness.wait_status("team-a", running.job_id, {"PROCESSING"})
    queued = harness.call(harness.service.submit("team-a", manifest(s3_server, "true", cpus=1.5)))
    wait_until(
        lambda: harness.call(harness.service.get("team-a", queued.job_id)).reason,
        timeout=30,
        message="the second job to wait for the first one's room",
    )
    harness.kill()
    for pair in pairs_of(running.job_id):
        remove_pair(pair)
    wait_until(
        lambda: not asyncio.run(leases(harness, running.job_id)),
        timeout=10 * harness.options.lease_ttl_s,
        interval=0.5,
        message="the removed sidecar's lease to run out while the scheduler is down",
    )
    again = Harness(harness.etcd_server, harness.options)
    try:
        final = again.wait_status("team-a", running.job_id, TERMINAL, timeout=120)
        assert final.status == "FAILED", final
        assert final.reason == "learner 1 lost: its sidecar is gone from the backend and holds no lease"
        done = again.wait_status("team-a", queued.job_id, TERMINAL)
        assert done.status == "COMPLETED", done
        assert leftovers(running.job_id) == []
    finally:
        again.kill()
