"""A lease blip on the real cluster (issue 27): etcd frozen past the sidecar's lease TTL while its learner runs in
a pod; the sidecar grants itself a new lease once etcd answers, and the job ends COMPLETED, never "learner lost"."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from controller_sidecar.settings import EtcdSettings
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.k8scluster import LocalCluster
from learnerkit.scheduler.backends.k8s_objects import SIDECAR_CONTAINER
from tests.integration.scheduler.conftest import HELD, TERMINAL, Harness, manifest
from tests.k8s.conftest import NAMESPACE
from tests.k8s.test_k8s_jobs import gone, learner_started, let_go
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.services, pytest.mark.timeout(600)]

LEASE_TTL_S = EtcdSettings.lease_ttl_s
"""The sidecar's lease (its default: the scheduler sets no other)."""
REGRANTED = "expired; granting a new one"
"""What the sidecar logs when it finds its lease gone and takes a new one."""


def test_etcd_paused_past_the_lease_ttl_keeps_the_running_job(
    k8s_harness: Harness,
    pod_s3: SimpleNamespace,
    scheduler_buckets: Any,
    k8s_api: Any,
    k8s_cluster: LocalCluster,
    etcd_server: EtcdServer,
) -> None:
    h = k8s_harness
    view = h.call(h.service.submit("team-a", manifest(pod_s3, HELD)))
    h.wait_status("team-a", view.job_id, {"PROCESSING"}, timeout=240)
    before = wait_until(lambda: learner_started(k8s_api, view.job_id), timeout=60, message="the learner running")
    pod = f"lk-{view.job_id}-1"
    with etcd_server.paused():
        frozen_at = time.monotonic()
        # What is awaited here is the TTL itself running out: no event can say so while etcd is frozen.
        wait_until(
            lambda: time.monotonic() - frozen_at > LEASE_TTL_S + 3,
            timeout=60,
            interval=0.5,
            message="the lease's TTL to pass with etcd frozen",
        )

    def sidecar_log() -> str:
        return k8s_cluster.kubectl("-n", NAMESPACE, "logs", pod, "-c", SIDECAR_CONTAINER)

    # The sidecar's log on a timeout says what `kubectl logs` answered: on 2026-11-30 it was another cluster's
    # kubelet having deleted this pod's log folder (each node now has its own, learnerkit/dev/k8scluster/mountns.py).
    wait_until(
        lambda: REGRANTED in sidecar_log(),
        timeout=120,
        interval=0.5,
        message=lambda: f"the sidecar to find its lease revoked and grant a new one; its log:\n{sidecar_log()[-4000:]}",
    )
    assert learner_started(k8s_api, view.job_id) == before, "the pod was replaced or its learner restarted"
    let_go(k8s_cluster, view.job_id)
    final = h.wait_status("team-a", view.job_id, TERMINAL)
    assert (final.status, final.reason) == ("COMPLETED", ""), final
    gone(k8s_api, view.job_id)
