"""Two real nodes (issue 21): a second kubelet in a network namespace of its own beside the first
(``LocalCluster.add_node``). A job running on a node that is lost resumes by itself on the other from its last
checkpoint, its lost pod deleted at once so the new attempt's pod (of the same name) does not wait for it.

Printed, never asserted (wall-clock): the second node's start, a free start (submit -> learner running), and the
move split as lost -> requeued (the loss grace plus a node read), requeued -> pod bound on the other node, bound
-> learner running, beside the anchor the issue names (the sidecar's lease TTL + a free start)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from controller_sidecar.settings import EtcdSettings
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.k8scluster import NODE_NAME, LocalCluster
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.nodes.marks import nodes_prefix
from tests.integration.scheduler.conftest import RESULTS_BUCKET, TERMINAL, Harness, manifest
from tests.integration.scheduler.test_drain_docker import ROOT
from tests.integration.scheduler.test_preemption_docker import TENANT, steps_in_history
from tests.k8s.conftest import NAMESPACE
from tests.k8s.test_k8s_jobs import gone, learner_started
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(900)]

GRACE_S = 3.0
STEPS = 100
JOB = f"SMOKE_MIN_STEP_SECONDS=0.5 python /opt/learner/smoke/train.py --steps {STEPS} --checkpoint-every 10"
"""At least 50 s of training: the loss comes once its first checkpoint is stored."""
JOB_EXTRA = "learnerkit:\n  checkpoint_interval: 1\n"


@pytest.fixture(scope="module")
def second_node(k8s_cluster: LocalCluster) -> Iterator[tuple[str, float]]:
    """A second kubelet, with its start in seconds; removed after these tests with everything it made."""
    began = time.monotonic()
    name = k8s_cluster.add_node()
    started_s = time.monotonic() - began
    try:
        yield name, started_s
    finally:
        k8s_cluster.remove_node(name)
    assert k8s_cluster.node_leftovers(name) == []


@pytest.fixture
def two_nodes(
    second_node: tuple[str, float],
    k8s_cluster: LocalCluster,
    etcd_server: EtcdServer,
    k8s_options: SchedulerOptions,
    k8s_backend: KubernetesBackend,
    scheduler_buckets: Any,
) -> Iterator[Harness]:
    """A scheduler that reads the nodes every half second, sees both, and loses a node NotReady for 3 s."""
    options = replace(k8s_options, nodes_interval_s=0.5, node_lost_grace_s=GRACE_S)
    made = Harness(etcd_server, options, root=ROOT, backend=k8s_backend)
    both = (NODE_NAME, second_node[0])
    try:
        wait_until(
            lambda: set(both) <= set(made.service.shared.admission.cluster.nodes),
            timeout=30,
            message="the scheduler to see both nodes",
        )
        yield made
    finally:
        for name in both:
            made.call(made.service.shared.store.etcd.delete(f"{nodes_prefix(ROOT)}drained/{name}"))
        made.kill()
        for name in both:  # a node the test lost is back for the tests after
            if not k8s_cluster.node_ready(name):
                k8s_cluster.restore_node(name)


def job_pods(api: Any, job_id: str) -> list[Any]:
    return list(CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector=f"learnerkit.io/job-id={job_id}").items)


def test_a_lost_nodes_job_resumes_on_the_other_node_from_its_last_checkpoint(
    two_nodes: Harness,
    second_node: tuple[str, float],
    pod_s3: SimpleNamespace,
    scheduler_buckets: Any,
    k8s_api: Any,
    k8s_cluster: LocalCluster,
) -> None:
    h = two_nodes
    submitted = time.monotonic()
    job = h.call(h.service.submit(TENANT, manifest(pod_s3, JOB, extra=JOB_EXTRA)))
    first_start = wait_until(lambda: learner_started(k8s_api, job.job_id), timeout=240, message="the learner running")
    free_start_s = time.monotonic() - submitted
    assert first_start is not None
    (lost,) = h.call(h.service.get(TENANT, job.job_id)).attempts[0].nodes
    (other,) = {NODE_NAME, second_node[0]} - {lost}
    assert [pod.spec.node_name for pod in job_pods(k8s_api, job.job_id)] == [lost], "bound where it was admitted"

    def a_checkpoint_stored() -> bool:
        listed = scheduler_buckets.list_objects_v2(Bucket=RESULTS_BUCKET, Prefix=f"{job.job_id}/attempt-1/")
        return any("/checkpoints/" in item["Key"] for item in listed.get("Contents", []))

    wait_until(a_checkpoint_stored, timeout=120, interval=0.5, message="the first checkpoint stored")
    lost_at = time.monotonic()
    k8s_cluster.lose_node(lost)

    def requeued() -> JobView | None:
        view = h.call(h.service.get(TENANT, job.job_id))
        return view if view.attempts and view.attempts[0].ended_by else None

    queued = wait_until(requeued, timeout=120, message="the job's first attempt ended by the node's loss")
    requeued_at = time.monotonic()
    assert queued is not None
    assert (queued.attempts[0].ended_by, queued.attempts[0].reason) == (
        "NODE_LOST",
        f"node {lost} went NotReady (over the {GRACE_S:g}s grace); resumes from its last checkpoint",
    )
    # Force-deleted with the teardown: no pod of the job is left Terminating on the lost node (no kubelet there
    # would ever confirm a graceful deletion, and the next attempt's pod has the same name).
    assert [pod.spec.node_name for pod in job_pods(k8s_api, job.job_id) if pod.spec.node_name == lost] == []

    def bound_on_the_other() -> bool:
        return any(pod.spec.node_name == other for pod in job_pods(k8s_api, job.job_id))

    wait_until(bound_on_the_other, timeout=120, interval=0.1, message=f"the new attempt's pod bound on {other}")
    bound_at = time.monotonic()
    wait_until(
        lambda: (started := learner_started(k8s_api, job.job_id)) is not None and started[0] != first_start[0],
        timeout=120,
        interval=0.1,
        message="the learner running again on the other node",
    )
    running_at = time.monotonic()

    summary = completed_by_attempt_2_on(h, scheduler_buckets, job.job_id, other)
    steps = steps_in_history(h, job.job_id)
    assert steps == sorted(set(steps)) and steps[-1] == STEPS, f"each step at most once, in order: {steps}"
    gone(k8s_api, job.job_id)
    moved_s = running_at - lost_at
    anchor_s = EtcdSettings.lease_ttl_s + free_start_s
    print(
        f"\ntwo nodes: second node up {second_node[1]:.1f}s; free start (submit -> learner running) "
        f"{free_start_s:.1f}s\nnode {lost} lost -> requeued {requeued_at - lost_at:.1f}s (grace {GRACE_S:g}s), "
        f"requeued -> pod bound on {other} {bound_at - requeued_at:.1f}s, bound -> learner running "
        f"{running_at - bound_at:.1f}s; lost -> running again {moved_s:.1f}s = {moved_s / anchor_s:.2f} x the "
        f"anchor (lease TTL {EtcdSettings.lease_ttl_s}s + free start = {anchor_s:.1f}s); resumed from step "
        f"{summary['start_step']}, history steps {steps[0]}..{steps[-1]}"
    )


def completed_by_attempt_2_on(h: Harness, buckets: Any, job_id: str, node: str) -> dict[str, Any]:
    """Assert that the job ended COMPLETED by its second attempt on ``node``, resumed from the first's checkpoint
    (its learner's summary starts past step 1 and ends at the last); that summary."""
    final = h.wait_status(TENANT, job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    second = final.attempts[1]
    assert (second.number, second.resumed_from, second.ended_by, second.nodes) == (2, 1, "COMPLETED", (node,))
    key = f"{job_id}/attempt-2/learner-1/results/summary.json"
    summary: dict[str, Any] = json.loads(buckets.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())
    assert summary["start_step"] > 1 and summary["final_step"] == STEPS, summary
    return summary
