"""Cluster capacity from the nodes' API objects, as the Kubernetes backend reports it to admission."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.backends.k8s import UNLABELLED_GPU_TYPE, health_from_api, node_from_api
from learnerkit.scheduler.backends.protocol import NodeHealth


def node(name: str, allocatable: dict[str, str], *, ready: str = "True", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
        "spec": spec,
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]},
    }


def test_gpu_node_capacity_and_type() -> None:
    raw = node("gpu-1", {"cpu": "31500m", "memory": "128Gi", "nvidia.com/gpu": "4"})
    assert node_from_api(raw) == Node("gpu-1", 31.5, 128 << 30, 4, "NVIDIA-A100-SXM4-80GB")


def test_gpu_node_without_the_product_label_counts_its_gpus() -> None:
    raw = node("gpu-2", {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"})
    raw["metadata"]["labels"] = {}
    assert node_from_api(raw) == Node("gpu-2", 4.0, 8 << 30, 2, UNLABELLED_GPU_TYPE)


def test_cpu_node_has_no_gpu_type_even_when_labelled() -> None:
    raw = node("cpu-1", {"cpu": "8", "memory": "32768Ki"})
    assert node_from_api(raw) == Node("cpu-1", 8.0, 32768 * 1024, 0, None)


def test_cordoned_and_not_ready_nodes_count_for_nothing() -> None:
    assert node_from_api(node("c", {"cpu": "8", "memory": "1Gi"}, unschedulable=True)) is None
    assert node_from_api(node("n", {"cpu": "8", "memory": "1Gi"}, ready="False")) is None


def test_health_tells_cordoned_from_not_ready_and_since_when() -> None:
    ready = node("r", {"cpu": "8", "memory": "1Gi"})
    assert health_from_api(ready) == NodeHealth()
    assert health_from_api(node("c", {"cpu": "8", "memory": "1Gi"}, unschedulable=True)) == NodeHealth(cordoned=True)
    lost = node("n", {"cpu": "8", "memory": "1Gi"}, ready="Unknown")
    lost["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-24T21:00:00Z"
    assert health_from_api(lost) == NodeHealth(not_ready_since=datetime(2026, 11, 24, 21, tzinfo=UTC).timestamp())
    lost["status"]["conditions"] = []
    assert health_from_api(lost).not_ready_since == 0.0
