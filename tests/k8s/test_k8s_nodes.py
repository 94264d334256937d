"""Nodes that change under the running scheduler on the real cluster (issue 21): the one node lost (its kubelet
and its pods' processes killed, the node NotReady) and back, and a second node registered through the API (a Node
object with no kubelet behind it) that placement and drains use."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.k8scluster import NODE_NAME, LocalCluster
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.nodes.marks import nodes_prefix
from tests.integration.scheduler.conftest import RESULTS_BUCKET, TERMINAL, Harness, manifest
from tests.integration.scheduler.test_drain_docker import ROOT, operator
from tests.integration.scheduler.test_preemption_docker import TENANT
from tests.k8s.conftest import NAMESPACE
from tests.k8s.test_k8s_jobs import gone, learner_started
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(900)]

GRACE_S = 3.0
"""``node_lost_grace_s`` here: a node NotReady this long is lost."""
SECOND = "lk-node-2"
JOB = "SMOKE_MIN_STEP_SECONDS=0.5 python /opt/learner/smoke/train.py --steps 100 --checkpoint-every 10"
JOB_EXTRA = "learnerkit:\n  checkpoint_interval: 1\n"


@pytest.fixture
def watching(
    etcd_server: EtcdServer, k8s_options: SchedulerOptions, k8s_backend: KubernetesBackend, scheduler_buckets: Any
) -> Iterator[Harness]:
    """A scheduler that reads the nodes every half second and loses a node NotReady for 3 s."""
    options = replace(k8s_options, nodes_interval_s=0.5, node_lost_grace_s=GRACE_S)
    made = Harness(etcd_server, options, root=ROOT, backend=k8s_backend)
    try:
        yield made
    finally:
        made.call(made.service.shared.store.etcd.delete(f"{nodes_prefix(ROOT)}drained/{SECOND}"))
        made.kill()


def test_a_lost_nodes_job_runs_again_from_its_last_checkpoint_once_the_node_is_back(
    watching: Harness,
    pod_s3: SimpleNamespace,
    scheduler_buckets: Any,
    k8s_api: Any,
    k8s_cluster: LocalCluster,
) -> None:
    h = watching
    job = h.call(h.service.submit(TENANT, manifest(pod_s3, JOB, extra=JOB_EXTRA)))
    h.wait_status(TENANT, job.job_id, {"PROCESSING"}, timeout=240)

    def running_with_a_stored_checkpoint() -> tuple[str, str] | None:
        listed = scheduler_buckets.list_objects_v2(Bucket=RESULTS_BUCKET, Prefix=f"{job.job_id}/attempt-1/")
        stored = any("/checkpoints/" in item["Key"] for item in listed.get("Contents", []))
        return learner_started(k8s_api, job.job_id) if stored else None

    # The learner's 100 steps take at least 50 s; its first checkpoint (step 10) is uploaded within a second of it.
    started = wait_until(
        running_with_a_stored_checkpoint, timeout=120, interval=0.5, message="a checkpoint stored, the learner running"
    )
    assert started is not None
    first_pod = started[0]
    lost_at = time.monotonic()
    k8s_cluster.lose_node()

    def requeued() -> JobView | None:
        view = h.call(h.service.get(TENANT, job.job_id))
        return view if view.status == "QUEUED" and view.attempts and view.attempts[0].ended_by else None

    queued = wait_until(requeued, timeout=120, message="the job requeued, its attempt ended by the node's loss")
    loss_to_requeue = time.monotonic() - lost_at
    assert queued is not None
    first = queued.attempts[0]
    assert first.ended_by == "NODE_LOST", first
    assert (
        first.reason
        == f"node {NODE_NAME} went NotReady (over the {GRACE_S:g}s grace); resumes from its last checkpoint"
    )
    back_at = time.monotonic()
    k8s_cluster.restore_node()

    def in_a_new_pod() -> bool:
        started = learner_started(k8s_api, job.job_id)
        return started is not None and started[0] != first_pod

    wait_until(
        in_a_new_pod,
        timeout=120,
        message=lambda: f"the learner running again in a new pod: {h.call(h.service.get(TENANT, job.job_id))}",
    )
    back_to_running = time.monotonic() - back_at
    final = h.wait_status(TENANT, job.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    second = final.attempts[1]
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, "COMPLETED"), second
    key = f"{job.job_id}/attempt-2/learner-1/results/summary.json"
    summary = json.loads(scheduler_buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())
    assert summary["start_step"] > 1 and summary["final_step"] == 100, summary
    gone(k8s_api, job.job_id)
    print(
        f"\nnode loss: lost -> requeued {loss_to_requeue:.1f}s (grace {GRACE_S:g}s); back -> learner running "
        f"{back_to_running:.1f}s; resumed from step {summary['start_step']}"
    )


def test_a_registered_second_node_is_used_for_placement_and_known_to_drain(
    watching: Harness,
    pod_s3: SimpleNamespace,
    scheduler_buckets: Any,
    k8s_api: Any,
    k8s_cluster: LocalCluster,
    etcd_server: EtcdServer,
) -> None:
    h = watching
    k8s_cluster.register_node(SECOND, {"cpu": "8", "memory": "16Gi", "pods": "110"})
    try:
        wait_until(
            lambda: SECOND in h.service.shared.admission.cluster.nodes,
            timeout=30,
            message="the running scheduler to see the second node at its next read of the nodes",
        )
        big = h.call(h.service.submit(TENANT, manifest(pod_s3, "sleep 600", cpus=4)))  # fits on the second only

        def bound() -> str | None:
            pods = CoreV1Api(k8s_api).list_namespaced_pod(
                NAMESPACE, label_selector=f"learnerkit.io/job-id={big.job_id}"
            )
            return next((pod.spec.node_name for pod in pods.items if pod.spec.node_name), None)

        assert wait_until(bound, timeout=120, message="the big job's pod bound to a node") == SECOND
        assert h.call(h.service.get(TENANT, big.job_id)).attempts[0].nodes == (SECOND,)
        h.call(h.service.cancel(TENANT, big.job_id))
        code, answer = operator(etcd_server, "drain", "no-such-node")
        assert code == 1 and f"the known nodes: {NODE_NAME}, {SECOND}" in answer["message"], answer
        assert operator(etcd_server, "drain", SECOND) == (0, {"node": SECOND, "drained": True, "changed": True})
        assert operator(etcd_server, "undrain", SECOND) == (0, {"node": SECOND, "drained": False, "changed": True})
    finally:
        k8s_cluster.forget_node(SECOND)
