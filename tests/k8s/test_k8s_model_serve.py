"""`learnerkit model serve --backend kubernetes` on the real one-node cluster: a registered version's files sent
into its pod over the exec channel, the pod ready on `/v2/health/ready` and answering `infer` with the logits of the
model called in-process; an alias moved rolls over with the Service's selector switched only once the new pod is
ready; `model stop` leaves nothing of the name.

This tier runs no kube-proxy and no endpoints controller, so the Service's cluster address is not routed here: the
test reaches each server at its pod's address (the host is the pod bridge's gateway) and checks the Service's
selector, which is what kube-proxy would route by."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import numpy as np
import pytest

from learnerkit.dev.k8scluster import LocalCluster
from learnerkit.scheduler.backends import k8s_modelobjects as mo
from learnerkit.scheduler.backends.modelservers import SERVER_IMAGE
from learnerkit.scheduler.serving.deployment import forget
from learnerkit_build.state import state_home
from tests.integration.catalog.test_model_serving import called, digits_model, infer_body, model, signed_job
from tests.integration.conftest import registry
from tests.k8s.conftest import NAMESPACE
from tests.waiting import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(900)]
__all__ = ["digits_model", "registry"]
"""Fixtures of the catalog's tier this test uses."""


@pytest.fixture
def cluster_env(
    k8s_cluster: LocalCluster, registry: str, digits_model: Path, tmp_path: Path
) -> Iterator[dict[str, str]]:
    """A tenant with the digits model registered and aliased `production`, serving on this cluster."""
    k8s_cluster.import_images(SERVER_IMAGE)
    folder, key = signed_job(tmp_path / "job", digits_model)
    variables = {
        "LEARNERKIT_CATALOG_REGISTRY": registry,
        "LEARNERKIT_TENANT": "team-k8s",
        "LEARNERKIT_SIGNING_KEY": str(key),
        "KUBECONFIG": str(k8s_cluster.kubeconfig),
        "LEARNERKIT_SCHEDULER_BACKEND": "kubernetes",
        "LEARNERKIT_K8S_NAMESPACE": NAMESPACE,
    }
    code, out = model("register-folder", str(folder), "--name", "digits", env=variables)
    assert code == 0, out
    code, out = model("alias", "digits", "production", json.loads(out)["version"], env=variables)
    assert code == 0, out
    yield variables
    selector = mo.model_selector("team-k8s", "digits")
    k8s_cluster.kubectl("-n", NAMESPACE, "delete", "pods,services,networkpolicies", "-l", selector, "--wait=true")
    forget(state_home() / "serving", "team-k8s", "digits")


def left(core: Any, net: Any) -> list[str]:
    selector = mo.model_selector("team-k8s", "digits")
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    services = core.list_namespaced_service(NAMESPACE, label_selector=selector).items
    policies = net.list_namespaced_network_policy(NAMESPACE, label_selector=selector).items
    return [f"{type(o).__name__} {o.metadata.name}" for o in (*pods, *services, *policies)]


def infer(pod: Any, x: np.ndarray[Any, Any]) -> dict[str, Any]:
    body = json.dumps(infer_body(x)).encode()
    request = urllib.request.Request(
        f"http://{pod.status.pod_ip}:{mo.PORT}/v2/models/digits/infer",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return dict(json.loads(answer.read()))


class Watcher:
    """Samples (the Service's version, whether that version's pod is Ready) until stopped."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.samples: list[tuple[str, bool]] = []
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        name = mo.service_name("team-k8s", "digits")
        while not self.stopping.wait(0.1):
            try:
                version = self.core.read_namespaced_service(name, NAMESPACE).spec.selector[mo.VERSION_LABEL]
                pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"{mo.VERSION_LABEL}={version}").items
            except kubernetes.client.ApiException as e:
                self.errors.append(e)
                return
            ready = any(c.type == "Ready" and c.status == "True" for p in pods for c in p.status.conditions or [])
            self.samples.append((version, ready))

    def stop(self) -> list[tuple[str, bool]]:
        self.stopping.set()
        self.thread.join(10)
        return self.samples


def test_a_version_served_on_the_cluster_rolls_over_on_ready_and_stops_clean(
    cluster_env: dict[str, str], k8s_cluster: LocalCluster, digits_model: Path, tmp_path: Path
) -> None:
    api = kubernetes.config.new_client_from_config(str(k8s_cluster.kubeconfig))
    core, net = kubernetes.client.CoreV1Api(api), kubernetes.client.NetworkingV1Api(api)
    code, out = model("serve", "digits@production", env=cluster_env)
    assert code == 0, out
    first = json.loads(out)
    assert first["url"] == f"http://{mo.service_name('team-k8s', 'digits')}.{NAMESPACE}.svc:8080"
    pod = core.read_namespaced_pod(first["container"], NAMESPACE)
    assert pod.spec.automount_service_account_token is False
    assert all(
        m.mount_path != "/var/run/secrets/kubernetes.io/serviceaccount" for m in pod.spec.containers[0].volume_mounts
    )
    x, logits = called(digits_model)
    answer = infer(pod, x)
    assert answer["model_version"] == first["version"]
    assert np.array_equal(np.array(answer["outputs"][0]["data"], dtype=np.float32), logits.ravel())

    folder, _ = signed_job(tmp_path / "job2", digits_model, Path(cluster_env["LEARNERKIT_SIGNING_KEY"]), b" ")
    code, out = model("register-folder", str(folder), "--name", "digits", env=cluster_env)
    assert code == 0, out
    second = json.loads(out)["version"]
    code, out = model("alias", "digits", "production", second, env=cluster_env)
    assert code == 0, out
    watcher = Watcher(core)
    wait_until(lambda: watcher.samples, timeout=30, message="the first sample")
    code, out = model("serve", "digits@production", env=cluster_env)
    assert code == 0, out
    new = mo.version_label(second)
    wait_until(lambda: any(v == new for v, _ in watcher.samples) or watcher.errors, timeout=30, message="a sample")
    samples = watcher.stop()
    assert not watcher.errors, watcher.errors
    rolled = json.loads(out)
    assert rolled["url"] == first["url"] and rolled["version"] == second
    assert samples[0][0] == mo.version_label(first["version"]), "sampling began before the roll-over"
    switched = [ready for version, ready in samples if version == new]
    assert switched and all(switched), "the Service named the new version before its pod was ready"
    kept = [f"V1Pod {rolled['container']}", f"V1Service {rolled['front']}", f"V1NetworkPolicy {rolled['front']}"]
    wait_until(
        lambda: left(core, net) == kept,
        timeout=120,
        message=lambda: f"only the new pod, the Service and the policy: {left(core, net)}",
    )
    assert infer(core.read_namespaced_pod(rolled["container"], NAMESPACE), x)["model_version"] == second

    code, out = model("stop", "digits", env=cluster_env)
    assert code == 0 and json.loads(out)["stopped"] == [second], out
    assert left(core, net) == [], "model stop waits until everything of the name is gone"
