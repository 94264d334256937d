"""Fencing on two real nodes (issue 44, docs/security.md "Fencing"): the node a job runs on is partitioned from the
control plane (its kubelet stopped while the job's containers run on, still reaching etcd and the object store
through the cluster bridge). The scheduler declares the node lost after its grace and fences the job to attempt 2;
the old sidecar reads the fence at its next lease refresh, halts its learner and gives its lease up; only then is
the job moved to the other node. Asserted from the real etcd (a watch of the job's keys, with their revisions) and
the real object store: no write of the old attempt after the fence, nothing of it stored once it was moved.

Printed, never asserted (wall-clock): partition -> fence, fence -> old lease gone, requeued -> learner running on
the other node."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.k8scluster import NODE_NAME, LocalCluster
from learnerkit.dev.k8scluster.containerd import sandboxes
from learnerkit.scheduler.facade import JobView
from tests.integration.scheduler.conftest import RESULTS_BUCKET, Harness, manifest
from tests.integration.scheduler.test_drain_docker import ROOT
from tests.integration.scheduler.test_preemption_docker import TENANT
from tests.k8s.test_k8s_jobs import gone, learner_started
from tests.k8s.test_k8s_two_nodes import (
    GRACE_S,
    JOB,
    JOB_EXTRA,
    STEPS,
    completed_by_attempt_2_on,
    job_pods,
    second_node,
    two_nodes,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(900)]

__all__ = ["second_node", "two_nodes"]
"""The two-node fixtures, shared with test_k8s_two_nodes.py."""


@dataclass(frozen=True)
class Change:
    key: str
    value: bytes | None
    """None for a delete."""
    revision: int
    seen_at: float
    """When the watch delivered it (monotonic): after etcd committed it."""


class Changes:
    """Every change under a prefix, as a watch of its own (on a thread and loop of its own) delivers them."""

    def __init__(self, server: EtcdServer, prefix: str) -> None:
        self.seen: list[Change] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._store = asyncio.run_coroutine_threadsafe(EtcdStore.connect(server.settings()), self._loop).result(10)
        self._task = asyncio.run_coroutine_threadsafe(self._watch(prefix), self._loop)

    async def _watch(self, prefix: str) -> None:
        async for event in self._store.watch_prefix(prefix):
            self.seen.append(Change(event.key, event.value, event.revision, time.monotonic()))

    def close(self) -> None:
        self._task.cancel()
        asyncio.run_coroutine_threadsafe(self._store.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def changes(etcd_server: EtcdServer) -> Iterator[Changes]:
    """Changes to every job's keys from now on."""
    made = Changes(etcd_server, keys.job_prefix("x", ROOT).removesuffix("x/"))
    try:
        yield made
    finally:
        made.close()


def learner_write(key: str, job_id: str) -> bool:
    """Whether ``key`` is one a sidecar writes (fenced): under ``learners/``, or a learner's ``history/`` entry
    (the scheduler's own entries there are ``job-<n>``)."""
    prefix = keys.job_prefix(job_id, ROOT)
    return key.startswith(f"{prefix}learners/") or (
        key.startswith(keys.history_prefix(job_id, ROOT)) and key.rsplit("/", 1)[1][:1].isdigit()
    )


def stored(buckets: Any, prefix: str) -> dict[str, tuple[str, datetime]]:
    """Each object under ``prefix`` with its ETag and time of storing."""
    listed = buckets.list_objects_v2(Bucket=RESULTS_BUCKET, Prefix=prefix).get("Contents", [])
    return {item["Key"]: (item["ETag"], item["LastModified"]) for item in listed}


def old_sidecar_log(cluster: LocalCluster, node: str, pod_uid: str) -> str:
    """The old sidecar's log as the partitioned node's containerd wrote it (no kubelet serves it any more)."""
    folder = cluster.nodes[node].folder / "logs" / "pods"
    return "".join(path.read_text() for path in sorted(folder.glob(f"*_{pod_uid}/sidecar/*.log")))


def test_a_partitioned_nodes_learner_is_fenced_before_the_job_moves_and_stores_nothing_after(
    two_nodes: Harness,
    second_node: tuple[str, float],
    changes: Changes,
    pod_s3: SimpleNamespace,
    scheduler_buckets: Any,
    k8s_api: Any,
    k8s_cluster: LocalCluster,
) -> None:
    h, partitioned = two_nodes, second_node[0]
    # The job goes to the added node (the one in a network namespace of its own): the first is cordoned until then.
    k8s_cluster.kubectl("cordon", NODE_NAME)
    try:
        wait_until(
            lambda: NODE_NAME not in h.service.shared.admission.cluster.nodes,
            timeout=30,
            message=f"the scheduler to leave the cordoned {NODE_NAME} out",
        )
        job = h.call(h.service.submit(TENANT, manifest(pod_s3, JOB, extra=JOB_EXTRA)))
        first = wait_until(lambda: learner_started(k8s_api, job.job_id), timeout=240, message="the learner running")
    finally:
        k8s_cluster.kubectl("uncordon", NODE_NAME)
    assert first is not None
    old_pod_uid = first[0]
    assert [pod.spec.node_name for pod in job_pods(k8s_api, job.job_id)] == [partitioned]
    wait_until(
        lambda: NODE_NAME in h.service.shared.admission.cluster.nodes,
        timeout=30,
        message=f"the scheduler to use {NODE_NAME} again",
    )
    attempt_1, attempt_2 = f"{job.job_id}/attempt-1/", f"{job.job_id}/attempt-2/"
    wait_until(
        lambda: any("/checkpoints/" in key for key in stored(scheduler_buckets, attempt_1)),
        timeout=120,
        interval=0.5,
        message="the first checkpoint stored",
    )

    partitioned_at = time.monotonic()
    k8s_cluster.partition_node(partitioned)
    assert sandboxes(k8s_cluster.nodes[partitioned]), "the job's containers run on without their kubelet"

    def requeued() -> JobView | None:
        view = h.call(h.service.get(TENANT, job.job_id))
        return view if view.attempts and view.attempts[0].ended_by else None

    queued = wait_until(requeued, timeout=120, message="the job's first attempt ended by the node's loss")
    requeued_at = time.monotonic()
    assert queued is not None and queued.attempts[0].ended_by == "NODE_LOST", queued
    alive = keys.learner_alive_key(job.job_id, 1, ROOT)
    assert h.call(h.service.shared.store.etcd.get(alive)) is None, "moved while the old sidecar held its lease"
    old_results = stored(scheduler_buckets, attempt_1)

    wait_until(
        lambda: any(pod.spec.node_name == NODE_NAME for pod in job_pods(k8s_api, job.job_id)),
        timeout=120,
        interval=0.1,
        message=f"the new attempt's pod bound on {NODE_NAME}",
    )
    bound_at, bound_wall = time.monotonic(), datetime.now(UTC)
    wait_until(
        lambda: (started := learner_started(k8s_api, job.job_id)) is not None and started[0] != old_pod_uid,
        timeout=120,
        interval=0.1,
        message=f"the learner running again on {NODE_NAME}",
    )
    running_at = time.monotonic()

    completed_by_attempt_2_on(h, scheduler_buckets, job.job_id, NODE_NAME)

    # The object store: the old attempt stored nothing once the job moved (its sidecar still ran on the
    # partitioned node); everything under the new attempt's prefix was stored once its pod existed.
    assert stored(scheduler_buckets, attempt_1) == old_results, "the old attempt stored results after it was moved"
    new_results = stored(scheduler_buckets, attempt_2)
    early = {key: at for key, (_, at) in new_results.items() if at < bound_wall.replace(microsecond=0)}
    assert early == {}, f"stored under {attempt_2} before its pod was bound"

    # etcd: the fence, then no write of a sidecar until the new attempt's pod existed; the old lease ended after it.
    prefix = keys.job_prefix(job.job_id, ROOT)
    mine = [c for c in changes.seen if c.key.startswith(prefix)]
    fence_key = keys.fence_key(job.job_id, ROOT)
    fenced = next(c for c in mine if c.key == fence_key and c.value == b"2")
    late = [c for c in mine if c.revision > fenced.revision and c.value is not None and c.seen_at < bound_at]
    stale = [(c.key, c.revision) for c in late if learner_write(c.key, job.job_id)]
    assert stale == [], f"writes of the old attempt after the fence (revision {fenced.revision})"
    # Moved only once the old attempt could no longer write: its sidecar's lease (the alive key) ended before the
    # scheduler closed the attempt (a requeue clears learners/ only after that, and deploys the next attempt after).
    lease_gone = next(c for c in mine if c.key == alive and c.value is None and c.revision > fenced.revision)
    closed = next(c for c in mine if c.key == f"{prefix}attempts/1" and b"NODE_LOST" in (c.value or b""))
    assert lease_gone.revision < closed.revision, "moved while the old sidecar held its lease"
    log = old_sidecar_log(k8s_cluster, partitioned, old_pod_uid)
    assert "fenced: the job's fence names attempt 2, not 1" in log, log[-2000:]
    gone(k8s_api, job.job_id)
    print(
        f"\nfencing on two nodes: {partitioned} partitioned -> fenced {fenced.seen_at - partitioned_at:.1f}s "
        f"(grace {GRACE_S:g}s); fenced -> old lease gone {lease_gone.seen_at - fenced.seen_at:.1f}s (lease TTL "
        f"{EtcdSettings.lease_ttl_s}s: the sidecar gave it up); -> requeued {requeued_at - lease_gone.seen_at:.1f}s; "
        f"requeued -> bound on {NODE_NAME} {bound_at - requeued_at:.1f}s -> learner running "
        f"{running_at - bound_at:.1f}s; {len(old_results)} objects of attempt 1, {len(new_results)} of attempt 2; "
        f"{len(mine)} etcd changes of the job watched; {STEPS} steps"
    )
