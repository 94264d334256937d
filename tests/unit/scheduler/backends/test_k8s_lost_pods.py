"""A lost node's pods: the kubelet that would confirm their deletion is gone, so a graceful delete leaves them
Terminating for good and a redeploy of the same pod name waits ``DELETION_WAIT_S`` (120 s), then fails. Deleted
with no grace (as ``kubectl delete --force --grace-period=0`` does for a dead node), they are gone at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client import ApiClient, V1ObjectMeta, V1Pod, V1PodList, V1PodSpec
from kubernetes.client.rest import ApiException

from learnerkit.scheduler.backends import k8s_cluster
from learnerkit.scheduler.backends import k8s_objects as ko
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster, _Kind
from learnerkit.scheduler.errors import BackendError

NAMESPACE = "learnerkit"
LABELS = {"app.kubernetes.io/managed-by": ko.MANAGED_BY, ko.JOB_LABEL: "j"}


class Pods:
    """An API server's pods with no kubelet on ``dead``: a graceful delete of a pod bound there only marks it."""

    def __init__(self, dead: str) -> None:
        self.dead = dead
        self.pods: dict[str, V1Pod] = {}

    def add(self, name: str, node: str) -> None:
        meta = V1ObjectMeta(name=name, namespace=NAMESPACE, labels=dict(LABELS))
        self.pods[name] = V1Pod(metadata=meta, spec=V1PodSpec(containers=[], node_name=node))

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        if body["metadata"]["name"] in self.pods:
            raise ApiException(status=409, reason="Conflict")
        self.add(body["metadata"]["name"], "n2")

    def read(self, name: str, namespace: str) -> V1Pod:
        if name not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return self.pods[name]

    def delete(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> None:
        pod = self.read(name, namespace)
        if grace_period_seconds == 0 or pod.spec.node_name != self.dead:
            del self.pods[name]
        else:
            pod.metadata.deletion_timestamp = datetime.now(UTC)

    def list(self, namespace: str, label_selector: str) -> V1PodList:
        return V1PodList(items=list(self.pods.values()))


def none_listed(namespace: str, label_selector: str) -> V1PodList:
    return V1PodList(items=[])


def cluster_with(pods: Pods) -> KubernetesCluster:
    """The pods above; the job has no object of any other kind."""
    cluster = KubernetesCluster(ApiClient(), namespace=NAMESPACE, validate=False, layout=ko.PodLayout.CLASSIC)
    for kind, calls in cluster._kinds.items():
        cluster._kinds[kind] = _Kind(calls.create, calls.read, calls.delete, none_listed)
    cluster._kinds["Pod"] = _Kind(pods.create, pods.read, pods.delete, pods.list)
    return cluster


def a_pod(name: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(LABELS)}}


def test_a_lost_nodes_pod_deleted_at_once_lets_the_next_attempt_take_its_name() -> None:
    pods = Pods(dead="n1")
    pods.add("lk-j-1", "n1")
    pods.add("lk-j-2", "n2")
    cluster = cluster_with(pods)
    assert cluster.delete_pods_on("j", frozenset({"n1"})) == [f"Pod {NAMESPACE}/lk-j-1"]
    assert list(pods.pods) == ["lk-j-2"], "only the pod on the lost node"
    cluster.teardown("j")
    assert cluster._create(a_pod("lk-j-1"), "j") is True
    assert pods.pods["lk-j-1"].spec.node_name == "n2"


def test_without_it_the_redeploy_waits_for_a_deletion_no_kubelet_confirms(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the forced deletion avoids, with the wait shortened: the pod stays Terminating and the create fails."""
    monkeypatch.setattr(k8s_cluster, "DELETION_WAIT_S", 0.0)
    pods = Pods(dead="n1")
    pods.add("lk-j-1", "n1")
    cluster = cluster_with(pods)
    cluster.teardown("j")
    with pytest.raises(BackendError, match="still being deleted"):
        cluster._create(a_pod("lk-j-1"), "j")
