"""The Kubernetes backend as the scheduler drives it (the same verbs as the Docker backend).

Capacity comes from the nodes' allocatable CPU, memory and ``nvidia.com/gpu``, with the GPU type from NVIDIA
feature discovery's ``nvidia.com/gpu.product`` label; cordoned and not-ready nodes count for nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime
from typing import Any

import kubernetes.client
from kubernetes.client.rest import ApiException
from kubernetes.utils.quantity import parse_quantity

from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.backends.deployment import DEFAULT_SHARED_SIZE, Egress, JobDeployment
from learnerkit.scheduler.backends.k8s_cluster import KubernetesCluster
from learnerkit.scheduler.backends.k8s_objects import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    LEARNER_CONTAINER,
    SIDECAR_CONTAINER,
    PodLayout,
)
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.errors import BackendError

FAILED_PHASES = ("Failed", "Unknown")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
UNLABELLED_GPU_TYPE = "unlabelled"
"""The GPU type of a node that advertises GPUs without GPU feature discovery's product label: jobs that ask
for any GPU fit there, jobs that name a type do not."""


def node_from_api(raw: dict[str, Any]) -> Node | None:
    """A schedulable, ready node's capacity from the API's JSON; None for the others."""
    spec, status = raw.get("spec") or {}, raw.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if spec.get("unschedulable") or not ready:
        return None
    allocatable = status.get("allocatable") or {}
    gpus = int(parse_quantity(allocatable.get(GPU_RESOURCE, "0")))
    labels = (raw.get("metadata") or {}).get("labels") or {}
    return Node(
        name=raw["metadata"]["name"],
        cpus=float(parse_quantity(allocatable.get("cpu", "0"))),
        memory_bytes=int(parse_quantity(allocatable.get("memory", "0"))),
        gpus=gpus,
        gpu_type=labels.get(GPU_PRODUCT_LABEL, UNLABELLED_GPU_TYPE) if gpus else None,
    )


def health_from_api(raw: dict[str, Any]) -> NodeHealth:
    """Whether the node is cordoned, and since when it is not Ready (its Ready condition False or Unknown, from
    that condition's last transition; a node without the condition counts as not ready since the epoch)."""
    spec, status = raw.get("spec") or {}, raw.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    since: float | None = None
    if not conditions:
        since = 0.0
    elif conditions[0].get("status") != "True":
        when = conditions[0].get("lastTransitionTime")
        since = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp() if when else 0.0
    return NodeHealth(cordoned=bool(spec.get("unschedulable")), not_ready_since=since)


class KubernetesBackend:
    deploys_held = False
    """A held pod would count against its node's room before the victims' pods are gone: the kube-scheduler would
    leave it Pending (no head start) or place it in room the admission gave the victims."""

    def __init__(
        self,
        backend: KubernetesCluster,
        egress: tuple[Egress, ...] = (),
        shared_storage_class: str | None = None,
        shared_size: str = DEFAULT_SHARED_SIZE,
    ) -> None:
        self.backend = backend
        self.egress = egress
        """etcd and S3 as CIDR and port, for the job's NetworkPolicy."""
        self.shared_storage_class = shared_storage_class
        """The StorageClass of multi-learner jobs' ReadWriteMany claims; None: the cluster's default."""
        self.shared_size = shared_size

    def nodes(self) -> list[Node]:
        return [node for node in (node_from_api(item) for item in self._list_nodes()) if node is not None]

    def node_health(self) -> dict[str, NodeHealth]:
        return {item["metadata"]["name"]: health_from_api(item) for item in self._list_nodes()}

    def _list_nodes(self) -> list[dict[str, Any]]:
        try:
            listed = kubernetes.client.CoreV1Api(self.backend.api).list_node(_preload_content=False)
        except ApiException as e:
            raise BackendError(f"listing the cluster's nodes: {e.status} {e.reason}", status=e.status) from e
        items: list[dict[str, Any]] = json.loads(listed.data).get("items", [])
        return items

    def deploy(self, job: JobDeployment) -> None:
        namespace = self.backend.namespace
        learners = tuple(replace(learner, namespace=namespace) for learner in job.learners)
        self.backend.deploy(
            replace(
                job,
                learners=learners,
                namespace=namespace,
                platform_egress=self.egress,
                shared_storage_class=self.shared_storage_class,
                shared_size=self.shared_size,
            )
        )

    def started(self, job_id: str, learners: int) -> bool:
        pods = self.backend.status(job_id).pods
        return len(pods) == learners and all(pod.phase in ("Running", "Succeeded") for pod in pods)

    def sidecars(self, job_id: str) -> SidecarStates:
        """Learners whose sidecar ended: in the classic layout its container's exit code; in both layouts a pod
        that failed (a native sidecar is restarted in place, so only its pod can end it). The others whose pod
        exists still run; a learner whose pod is gone (deleted, evicted) is in neither."""
        classic = self.backend.layout is PodLayout.CLASSIC
        exited: dict[int, int] = {}
        running: set[int] = set()
        ended_by: dict[int, str] = {}
        log_tails: dict[int, str] = {}
        for pod in self.backend.status(job_id).pods:
            sidecar = next((c for c in pod.containers if c.name == SIDECAR_CONTAINER), None)
            if classic and sidecar is not None and sidecar.state == "terminated" and sidecar.exit_code is not None:
                exited[pod.learner_id] = sidecar.exit_code
                if sidecar.message:
                    log_tails[pod.learner_id] = sidecar.message
            elif pod.phase in FAILED_PHASES:
                exited[pod.learner_id] = 1
            else:
                running.add(pod.learner_id)
                continue
            if pod.phase in FAILED_PHASES and pod.reason:
                ended_by[pod.learner_id] = pod.reason
        return SidecarStates(exited, frozenset(running), ended_by, log_tails)

    def learners_running(self, job_id: str) -> set[int]:
        """Learners whose learner container the kubelet reports running (or waiting to start)."""
        return {
            pod.learner_id
            for pod in self.backend.status(job_id).pods
            for container in pod.containers
            if container.name == LEARNER_CONTAINER and container.state in ("running", "waiting", "unknown")
        }

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        """Never: a native sidecar (1.29+) is restarted by the kubelet itself (``restartPolicy: Always``), in the
        pod whose ``emptyDir`` keeps ``/job``; a classic one ends with its pod (``restartPolicy: Never``)."""
        return False

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        """How each learner container that has terminated ended.

        The pod's ``restartPolicy: Never`` keeps a terminated learner container terminated, so this stays
        true until teardown; the native sidecar beside it may still run (it reports the final status).
        """
        return {
            pod.learner_id: LearnerEnd(container.exit_code, container.reason == "OOMKilled")
            for pod in self.backend.status(job_id).pods
            for container in pod.containers
            if container.name == LEARNER_CONTAINER
            and container.state == "terminated"
            and container.exit_code is not None
        }

    def learner_image_digest(self, job_id: str) -> str:
        """The digest of the learner image the cluster runs for the job (the first learner's ``imageID``, which
        names the image by its registry digest where the kubelet pulled it); empty before a learner started."""
        for pod in self.backend.status(job_id).pods:
            for container in pod.containers:
                if container.name == LEARNER_CONTAINER and (found := _DIGEST.findall(container.image_id)):
                    return str(found[-1])
        return ""

    def teardown(self, job_id: str) -> None:
        self.backend.teardown(job_id)

    def delete_lost_pods(self, job_id: str, nodes: frozenset[str]) -> None:
        self.backend.delete_pods_on(job_id, nodes)

    def job_ids(self, instance: str) -> set[str]:
        return set(self.backend.list_jobs(instance=instance))
