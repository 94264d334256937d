"""FfDL manifests through the scheduler and its Kubernetes backend on a real kube-apiserver, kube-scheduler and
kubelet (tests/k8s/cluster.py): the real etcd and S3 behind them, the project's own learner and sidecar images."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_objects import PodLayout
from tests.integration.scheduler.conftest import RESULTS_BUCKET, TERMINAL, Harness, manifest
from tests.k8s.conftest import job_objects_left

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(900)]

SMOKE = "python /opt/learner/smoke/train.py --steps {steps} --checkpoint-every 10"


def stored(client: Any, key: str) -> bytes:
    return bytes(client.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())


def test_a_1_20_server_gets_the_classic_layout(k8s_backend: KubernetesBackend) -> None:
    assert k8s_backend.backend.layout is PodLayout.CLASSIC


def test_manifest_runs_to_completed_with_logs_results_and_metrics(
    k8s_harness: Harness, pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any
) -> None:
    view = k8s_harness.call(k8s_harness.service.submit("team-a", manifest(pod_s3, SMOKE.format(steps=30))))
    final = k8s_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    summary = json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-1/results/summary.json"))
    assert summary["final_step"] == 30
    assert final.learners[0].status == "COMPLETED" and {"loss", "accuracy"} <= set(final.learners[0].metrics)
    log = k8s_harness.call(k8s_harness.service.logs("team-a", view.job_id))
    assert log.finished and b"done: steps 1..30" in log.read()
    assert job_objects_left(k8s_api, view.job_id) == []


def test_cancel_in_processing_leaves_nothing(
    k8s_harness: Harness, pod_s3: SimpleNamespace, scheduler_buckets: Any, k8s_api: Any
) -> None:
    view = k8s_harness.call(k8s_harness.service.submit("team-a", manifest(pod_s3, "sleep 300")))
    k8s_harness.wait_status("team-a", view.job_id, {"PROCESSING"}, timeout=240)
    assert job_objects_left(k8s_api, view.job_id) != []
    cancelled = k8s_harness.call(k8s_harness.service.cancel("team-a", view.job_id))
    assert cancelled.status == "CANCELLED"
    assert job_objects_left(k8s_api, view.job_id) == []
