"""The real-cluster tier: a Kubernetes node built from Debian's source (``make k8s-binaries``), started per session.

Without the cached binaries nothing here is collected and the run ends with one line saying so (``make test``);
``make test-k8s`` builds them first. Needs root (bridge, cgroups, containerd), like the kubelet itself.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes.client
import pytest

from learnerkit.dev.k8scluster import SHARED_CLASS, Binaries, LocalCluster, cached_binaries
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.backends.deployment import Egress
from learnerkit.scheduler.backends.k8s import KubernetesBackend
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO, build_inputs
from tests.integration.scheduler.conftest import Harness, scheduler_buckets

NAMESPACE = "learnerkit"
LEARNER_IMAGE = "learnerkit/pytorch:2.13-cpu-py3.11"

__all__ = ["build_inputs", "scheduler_buckets"]
"""Fixtures of the other tiers this one uses."""

BINARIES = cached_binaries()
SKIPPED = "tests/k8s skipped: no cached Kubernetes binaries; `make test-k8s` builds them (scripts/k8s-binaries.sh)"
if BINARIES is None:
    collect_ignore_glob = ["test_*.py"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if BINARIES is None:
        terminalreporter.write_line(SKIPPED)


@pytest.fixture(scope="session")
def k8s_binaries() -> Binaries:
    if BINARIES is None:
        pytest.skip(SKIPPED)
    return BINARIES


@pytest.fixture(scope="session")
def sidecar_image(build_inputs: BuildInputs) -> str:
    """The sidecar image's reference, as the node has it."""
    sidecar = build_sidecar(REPO, build_inputs, lambda line: None)
    return sidecar.immutable_reference or sidecar.reference


@pytest.fixture(scope="session")
def k8s_cluster(k8s_binaries: Binaries, sidecar_image: str) -> Iterator[LocalCluster]:
    """The running cluster with the learner and sidecar images on its node and the backend's namespace."""
    cluster = LocalCluster(k8s_binaries, Path(tempfile.mkdtemp(prefix="lk-k8s-")))
    try:
        cluster.start()
        cluster.import_images(LEARNER_IMAGE, sidecar_image)
        cluster.kubectl("create", "namespace", NAMESPACE)
        yield cluster
    finally:
        cluster.stop()
    assert cluster.leftovers() == []


@pytest.fixture(scope="session")
def k8s_api(k8s_cluster: LocalCluster) -> Any:
    return KubernetesCluster.from_kubeconfig(str(k8s_cluster.kubeconfig), namespace=NAMESPACE).api


@pytest.fixture(scope="session")
def pod_s3(k8s_cluster: LocalCluster, s3_server: Any) -> SimpleNamespace:
    """The S3 server as pods (and the scheduler) reach it: through the node's gateway."""
    port = k8s_cluster.forward(int(s3_server.endpoint_url.rsplit(":", 1)[1]))
    return SimpleNamespace(
        endpoint_url=f"http://{k8s_cluster.gateway}:{port}",
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        port=port,
    )


@pytest.fixture(scope="session")
def pod_etcd_port(k8s_cluster: LocalCluster, etcd_server: Any) -> int:
    """The etcd server as pods reach it: through the node's gateway."""
    return k8s_cluster.forward(etcd_server.client_port)


@pytest.fixture(scope="session")
def k8s_options(
    k8s_cluster: LocalCluster, pod_etcd_port: int, pod_s3: SimpleNamespace, sidecar_image: str
) -> SchedulerOptions:
    catalog = ImageCatalog(REPO)
    return SchedulerOptions(
        platform=Platform(etcd_endpoints=f"{k8s_cluster.gateway}:{pod_etcd_port}", sidecar_image=sidecar_image),
        catalog=catalog.frameworks(),
        resolve_image=catalog.resolve,
        policy=AdmissionPolicy(ready_timeout_s=180),
        submit_policy=SubmitPolicy(object_stores=(str(origin(pod_s3.endpoint_url)),)),
    )


@pytest.fixture(scope="session")
def k8s_backend(k8s_cluster: LocalCluster, pod_etcd_port: int, pod_s3: SimpleNamespace) -> KubernetesBackend:
    """The scheduler's backend, its job policies letting pods reach etcd and S3 on the gateway."""
    api = KubernetesCluster.from_kubeconfig(str(k8s_cluster.kubeconfig), namespace=NAMESPACE)
    gateway = f"{k8s_cluster.gateway}/32"
    return KubernetesBackend(
        api, (Egress(gateway, pod_etcd_port), Egress(gateway, pod_s3.port)), shared_storage_class=SHARED_CLASS
    )


@pytest.fixture
def k8s_harness(
    k8s_cluster: LocalCluster,
    etcd_server: Any,
    k8s_options: SchedulerOptions,
    k8s_backend: KubernetesBackend,
    scheduler_buckets: Any,
) -> Iterator[Harness]:
    made = Harness(etcd_server, k8s_options, backend=k8s_backend)
    yield made
    made.kill()


def job_objects_left(api: Any, job_id: str) -> list[str]:
    """Everything labelled with the job still in the namespace: pods, services, policies, secrets."""
    core, net = kubernetes.client.CoreV1Api(api), kubernetes.client.NetworkingV1Api(api)
    selector = f"learnerkit.io/job-id={job_id}"
    listings = {
        "pod": core.list_namespaced_pod,
        "service": core.list_namespaced_service,
        "secret": core.list_namespaced_secret,
        "networkpolicy": net.list_namespaced_network_policy,
    }
    return [
        f"{kind} {item.metadata.name}"
        for kind, listing in listings.items()
        for item in listing(NAMESPACE, label_selector=selector).items
    ]
