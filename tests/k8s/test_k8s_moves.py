"""Jobs that move on the real cluster (issue 21): preempted by a job of higher priority, moved off a drained node,
and stopped from outside (its pod deleted, as an eviction or ``kubectl delete pod`` does), each resuming by itself
from its checkpoint with every step once in its metric history.

The one node has 2 CPUs: two jobs of 1.5 CPUs never run together (the same room as the Docker tests)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.k8scluster import NODE_NAME
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.nodes.marks import nodes_prefix
from learnerkit.scheduler.preemption.rules import PreemptionRules
from tests.integration.scheduler.conftest import TERMINAL, Harness, manifest
from tests.integration.scheduler.test_drain_docker import ROOT, operator
from tests.integration.scheduler.test_preemption_docker import (
    TENANT,
    URGENT_EXTRA,
    preempted,
    running_with_metrics,
    steps_in_history,
)
from tests.k8s.conftest import NAMESPACE
from tests.k8s.test_k8s_jobs import gone
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(900)]

STEPS = 100
JOB = f"SMOKE_MIN_STEP_SECONDS=0.3 python /opt/learner/smoke/train.py --steps {STEPS} --checkpoint-every 10"
"""At least 30 s of training: the preemption or drain asked once the first metrics are in etcd finds it running."""
VICTIM_EXTRA = "learnerkit:\n  priority: -10\n  halt_grace: 60\n"


@pytest.fixture
def moving(
    etcd_server: EtcdServer, k8s_options: SchedulerOptions, k8s_backend: KubernetesBackend, scheduler_buckets: Any
) -> Iterator[Harness]:
    """A scheduler whose jobs may be preempted a second after they run, reading the nodes and drain marks every
    half second; whatever the test's end, no drain mark is left for the next test's scheduler."""
    options = replace(k8s_options, preemption=PreemptionRules(min_run_s=1.0), nodes_interval_s=0.5)
    made = Harness(etcd_server, options, root=ROOT, backend=k8s_backend)
    try:
        yield made
    finally:
        made.call(made.service.shared.store.etcd.delete(f"{nodes_prefix(ROOT)}drained/{NODE_NAME}"))
        made.kill()


def test_a_preempted_job_resumes_from_its_checkpoint_with_each_step_once(
    moving: Harness, pod_s3: SimpleNamespace, k8s_api: Any
) -> None:
    h = moving
    victim = h.call(h.service.submit(TENANT, manifest(pod_s3, JOB, cpus=1.5, extra=VICTIM_EXTRA)))
    running_with_metrics(h, victim.job_id)
    urgent = h.call(h.service.submit(TENANT, manifest(pod_s3, "true", cpus=1.5, extra=URGENT_EXTRA)))
    assert preempted(h, victim.job_id).status != "HALTED"
    assert h.wait_status(TENANT, urgent.job_id, TERMINAL).status == "COMPLETED"
    final = h.wait_status(TENANT, victim.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    first, second = final.attempts
    assert (first.ended_by, first.reason) == ("PREEMPTED", f"preempted by job {urgent.job_id}"), first
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, "COMPLETED"), second
    assert steps_in_history(h, victim.job_id) == list(range(1, STEPS + 1)), "each step once over both attempts"
    gone(k8s_api, victim.job_id)
    gone(k8s_api, urgent.job_id)


def test_a_drained_nodes_job_waits_and_resumes_from_its_checkpoint_on_undrain(
    moving: Harness, pod_s3: SimpleNamespace, k8s_api: Any, etcd_server: EtcdServer
) -> None:
    h = moving
    job = h.call(h.service.submit(TENANT, manifest(pod_s3, JOB)))
    running_with_metrics(h, job.job_id)
    code, answer = operator(etcd_server, "drain", "no-such-node")
    assert code == 1 and f"the known nodes: {NODE_NAME}" in answer["message"], answer
    assert operator(etcd_server, "drain", NODE_NAME) == (0, {"node": NODE_NAME, "drained": True, "changed": True})

    def moved_off() -> JobView | None:
        view = h.call(h.service.get(TENANT, job.job_id))
        return view if view.status == "QUEUED" and view.attempts and view.attempts[0].ended_by else None

    queued = wait_until(moved_off, timeout=180, message="the job back in the queue, its first attempt ended")
    assert queued is not None
    assert (queued.attempts[0].ended_by, queued.attempts[0].reason) == ("DRAINED", f"node {NODE_NAME} drained")
    gone(k8s_api, job.job_id)
    assert h.call(h.service.get(TENANT, job.job_id)).status == "QUEUED"  # the only node takes no new learner

    assert operator(etcd_server, "undrain", NODE_NAME) == (0, {"node": NODE_NAME, "drained": False, "changed": True})
    final = h.wait_status(TENANT, job.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    second = final.attempts[1]
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, "COMPLETED"), second
    assert steps_in_history(h, job.job_id) == list(range(1, STEPS + 1)), "each step once over both attempts"
    gone(k8s_api, job.job_id)


def test_a_job_whose_pod_is_deleted_from_outside_resumes_from_its_checkpoint_with_each_step_once(
    moving: Harness, pod_s3: SimpleNamespace, k8s_api: Any
) -> None:
    h = moving
    job = h.call(h.service.submit(TENANT, manifest(pod_s3, JOB)))
    running_with_metrics(h, job.job_id)
    core = CoreV1Api(k8s_api)
    [pod] = core.list_namespaced_pod(NAMESPACE, label_selector=f"learnerkit.io/job-id={job.job_id}").items
    core.delete_namespaced_pod(pod.metadata.name, NAMESPACE)  # as `kubectl delete pod`: SIGTERM, then the grace

    final = h.wait_status(TENANT, job.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    first, second = final.attempts
    assert first.ended_by == "INTERRUPTED", first
    assert first.reason.startswith("stopped from outside the scheduler (learner 1 halted"), first.reason
    assert (second.number, second.resumed_from, second.ended_by) == (2, 1, "COMPLETED"), second
    assert steps_in_history(h, job.job_id) == list(range(1, STEPS + 1)), "each step once over both attempts"
    gone(k8s_api, job.job_id)
