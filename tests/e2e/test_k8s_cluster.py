"""The Kubernetes backend against a real cluster: runs only where $KUBECONFIG points at one.

It creates a throwaway namespace, deploys a two-learner job, waits until every pod is scheduled or says
why it cannot be, tears the job down and checks that nothing labelled with it is left. The images default
to busybox (the pods need not train: this checks that the API server admits what the builders produce,
native sidecar included); set LEARNERKIT_E2E_LEARNER_IMAGE and LEARNERKIT_E2E_SIDECAR_IMAGE for real ones.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import kubernetes.client
import pytest

from controller_sidecar.endpoints import Endpoints
from learnerkit.pair.spec import PairSpec
from learnerkit.scheduler.backends import deployment as dep
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="no KUBECONFIG: the real-cluster test was skipped"),
]

BUSYBOX = "busybox:1.36"


@pytest.fixture
def backend() -> Iterator[KubernetesCluster]:
    namespace = f"learnerkit-e2e-{uuid.uuid4().hex[:8]}"
    backend = KubernetesCluster.from_kubeconfig(os.environ["KUBECONFIG"], namespace=namespace)
    core = kubernetes.client.CoreV1Api(backend.api)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    yield backend
    core.delete_namespace(namespace)


def test_deploy_status_teardown_on_a_real_cluster(backend: KubernetesCluster) -> None:
    learner_image = os.environ.get("LEARNERKIT_E2E_LEARNER_IMAGE", BUSYBOX)
    sidecar_image = os.environ.get("LEARNERKIT_E2E_SIDECAR_IMAGE", BUSYBOX)
    learners = tuple(
        PairSpec(
            job_id="e2e",
            learner_id=n,
            num_learners=2,
            learner_image=learner_image,
            sidecar_image=sidecar_image,
            command=("sleep", "30"),
            sidecar_config={},
            endpoints=Endpoints("127.0.0.1:2379"),
            cpus=0.1,
            memory_bytes=64 << 20,
            halt_grace_s=1,
            shutdown_deadline_s=1,
            namespace=backend.namespace,
        )
        for n in (1, 2)
    )
    job = dep.JobDeployment("e2e", learners, distributed=True, namespace=backend.namespace)
    deployed = backend.deploy(job)
    assert len(deployed.created) == 5
    assert backend.deploy(job).created == ()
    status = wait_until(
        lambda: (
            (found := backend.status("e2e")).exists
            and all(pod.phase != "Pending" or pod.reason for pod in found.pods)
            and found
        ),
        timeout=120,
        interval=1,
        message="every pod scheduled, or pending with a reason",
    )
    assert [pod.learner_id for pod in status.pods] == [1, 2]
    assert backend.list_jobs() == ["e2e"]
    assert len(backend.teardown("e2e")) == 5
    # Deleted pods linger while they terminate (the grace period): wait until nothing is left.
    wait_until(lambda: backend.list_jobs() == [], timeout=120, interval=1, message="every object of the job gone")
