"""A job's Kubernetes objects as plain dicts: pure functions, no API calls (``k8s_cluster.py`` sends them).

Per learner a Pod: the learner container plus the controller sidecar, sharing ``/job``, in one of two
layouts (``PodLayout``, chosen from the server's version): a *native sidecar* (an init container with
``restartPolicy: Always``, Kubernetes 1.29+), or the *classic* layout of older servers (two ordinary
containers; the sidecar ends itself once it has stored the results). Per job a Secret that only the sidecar
references (its credentials, and files such as the package index's CA bundle), a NetworkPolicy, and for
multi-learner jobs a headless Service that gives every learner a stable DNS name and a ReadWriteMany
PersistentVolumeClaim every learner mounts at ``/job/shared`` (FfDL's job volume; one learner gets an emptyDir
there). See docs/kubernetes.md for the reasoning behind each field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, TypedDict

import kubernetes_validate
import kubernetes_validate.utils

from learner.paths import DIR_DEFAULTS, JOB_DIR, SHARED_DIR
from learnerkit.pair.spec import LEARNER_UID, SIDECAR_CPUS, SIDECAR_MEMORY_BYTES, SIDECAR_UID, PairSpec
from learnerkit.scheduler.backends.deployment import JobDeployment, distributed_env
from learnerkit.scheduler.errors import InvalidObjectError

KUBERNETES_VERSION = "1.30"
"""The schema every object is validated against; 1.29 made native sidecars default-on."""
NATIVE_SIDECAR_SINCE = (1, 29)
"""The first release with native sidecars on by default; older servers silently drop the field."""

JOB_LABEL = "learnerkit.io/job-id"
LEARNER_LABEL = "learnerkit.io/learner-id"
INSTANCE_LABEL = "learnerkit.io/scheduler-instance"
MANAGED_BY = "learnerkit-scheduler"
LEARNER_CONTAINER = "learner"
SIDECAR_CONTAINER = "sidecar"
FOLDERS_CONTAINER = "job-folders"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""Set on every GPU node by NVIDIA GPU feature discovery (part of the GPU operator)."""
SHM_SIZE = "1Gi"
DATA_DIR = DIR_DEFAULTS["DATA_DIR"]
TMP_SIZE = "512Mi"
STOP_MARGIN_S = 10
"""The pod's grace period exceeds the learner's halt grace plus the sidecar's deadline by this much."""
SIDECAR_METRICS_PORT = 9102
SIDECAR_FILES_VOLUME = "sidecar-files"
SIDECAR_FILE_MODE = 0o444
JOB_FOLDER_MODE = "0775"
"""The learner contract's folders, as the learner image has them (Docker copies them into the job volume):
writable by group 0, which the learner and the sidecar share."""
FOLDERS_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "50m", "memory": "32Mi"},
    "limits": {"cpu": "50m", "memory": "32Mi"},
}
SIDECAR_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"cpu": f"{SIDECAR_CPUS:g}", "memory": f"{SIDECAR_MEMORY_BYTES >> 20}Mi"},
}
"""Fixed for every sidecar (``SIDECAR_CPUS``, ``SIDECAR_MEMORY_BYTES``, as on Docker); requests are what it
needs when idle."""


class PodLayout(StrEnum):
    NATIVE_SIDECAR = "native-sidecar"
    """The sidecar is an init container with ``restartPolicy: Always``: started first, stopped last."""
    CLASSIC = "classic"
    """Learner and sidecar are two ordinary containers (as FfDL ran its controller); the sidecar exits once
    it has stored the results, so the pod ends."""


def layout_for_version(major: str, minor: str) -> PodLayout:
    """The layout for a server reporting ``major``/``minor`` (``/version``; ``minor`` may carry a ``+``)."""
    found = re.match(r"\d+", minor or "")
    if not major.isdigit() or found is None:
        raise ValueError(f"the server's version {major!r}.{minor!r} is not a number")
    return PodLayout.NATIVE_SIDECAR if (int(major), int(found.group())) >= NATIVE_SIDECAR_SINCE else PodLayout.CLASSIC


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]


class KubeObject(TypedDict, total=False):
    """One Kubernetes object as the API takes it (the wire format; dataclasses stay inside)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    type: str
    stringData: dict[str, str]
    immutable: bool


def job_labels(job_id: str, instance: str = "") -> dict[str, str]:
    """The labels every object of a job carries; ``learnerkit.io/job-id`` is what teardown selects on, the
    scheduler instance what its orphan sweep selects on."""
    labels = {
        "app.kubernetes.io/name": "learnerkit-learner",
        "app.kubernetes.io/instance": f"lk-{job_id}",
        "app.kubernetes.io/part-of": "learnerkit",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        JOB_LABEL: job_id,
    }
    if instance:
        labels[INSTANCE_LABEL] = instance
    return labels


def job_selector(job_id: str) -> str:
    """The label selector of everything a job owns."""
    return f"{JOB_LABEL}={job_id},app.kubernetes.io/managed-by={MANAGED_BY}"


def _meta(name: str, namespace: str, labels: Mapping[str, str]) -> ObjectMeta:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def restricted_pod_security_context(uid: int) -> dict[str, Any]:
    """A pod's share of the "restricted" profile: non-root as user ``uid``, the runtime's default seccomp."""
    return {"runAsNonRoot": True, "runAsUser": uid, "seccompProfile": {"type": "RuntimeDefault"}}


def restricted_security_context(uid: int) -> dict[str, Any]:
    """The Pod Security Standard "restricted" profile, plus a read-only root file system, as user ``uid``."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _quantity_cpu(cpus: float) -> str:
    return f"{math.ceil(cpus * 1000)}m"


def learner_resources(learner: PairSpec) -> dict[str, dict[str, str]]:
    """Requests equal limits (Guaranteed QoS for the learner); GPUs are an extended resource (limit only)."""
    limits: dict[str, str] = {}
    if learner.cpus:
        limits["cpu"] = _quantity_cpu(learner.cpus)
    if learner.memory_bytes:
        limits["memory"] = str(learner.memory_bytes)
    requests = dict(limits)
    if learner.gpus:
        limits[GPU_RESOURCE] = str(learner.gpus)
    return {"requests": requests, "limits": limits}


def _env_list(env: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in sorted(env.items())]


def secret_file_key(path: str) -> str:
    """The Secret's key of the sidecar file at ``path``: ``file.etc.learnerkit.pip.ca.pem``. The dots keep it
    apart from the credentials' keys, which are variable names."""
    return "file" + path.replace("/", ".")


def _secret_env(job: JobDeployment, learner: PairSpec) -> list[dict[str, Any]]:
    """The credentials, each variable naming its key: ``envFrom`` would also turn the Secret's files into
    variables (a CA bundle of 200 KB past the kernel's 128 KiB limit on one, and the sidecar would not start)."""
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": job.secret_name, "key": name}}}
        for name in sorted(learner.endpoints.env())
    ]


def _file_mounts(learner: PairSpec) -> list[dict[str, Any]]:
    return [
        {"name": SIDECAR_FILES_VOLUME, "mountPath": path, "subPath": secret_file_key(path), "readOnly": True}
        for path in sorted(learner.sidecar_files)
    ]


def _files_volume(job: JobDeployment, learner: PairSpec) -> list[dict[str, Any]]:
    """The Secret's files, for the sidecar's mounts alone (a pod's volume is only where a container mounts it)."""
    if not learner.sidecar_files:
        return []
    items = [{"key": secret_file_key(path), "path": secret_file_key(path)} for path in sorted(learner.sidecar_files)]
    secret = {"secretName": job.secret_name, "items": items, "defaultMode": SIDECAR_FILE_MODE}
    return [{"name": SIDECAR_FILES_VOLUME, "secret": secret}]


def learner_container(job: JobDeployment, learner: PairSpec) -> dict[str, Any]:
    """The learner: no credentials, no service account token, nothing of the Secret."""
    env = {
        "JOB_ID": learner.job_id,
        "LEARNER_ID": str(learner.learner_id),
        "NUM_LEARNERS": str(learner.num_learners),
        "GPU_COUNT": str(learner.gpus),
        "LEARNER_HALT_GRACE": f"{learner.halt_grace_s:g}",
        # With shareProcessNamespace the pause process is PID 1: tini then reaps as a subreaper.
        "TINI_SUBREAPER": "1",
        **learner.learner_env,
        **distributed_env(job, learner),
    }
    container: dict[str, Any] = {
        "name": LEARNER_CONTAINER,
        "image": learner.learner_image,
        "securityContext": restricted_security_context(LEARNER_UID),
        "resources": learner_resources(learner),
        "volumeMounts": [
            {"name": "job", "mountPath": JOB_DIR},
            {"name": "shared", "mountPath": SHARED_DIR},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "learner-tmp", "mountPath": "/tmp"},
            *([{"name": "host-data", "mountPath": DATA_DIR, "readOnly": True}] if learner.data_mount else []),
        ],
    }
    if isinstance(learner.command, str):
        env["LEARNER_COMMAND"] = learner.command
    else:
        container["args"] = list(learner.command)
    container["env"] = [
        *_env_list(env),
        {"name": "DOWNWARD_API_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    if job.distributed:
        container["ports"] = [{"name": "rendezvous", "containerPort": job.master_port}]
    return container


def sidecar_container(
    job: JobDeployment, learner: PairSpec, layout: PodLayout = PodLayout.NATIVE_SIDECAR
) -> dict[str, Any]:
    """The sidecar: natively, started before the learner, kept running, stopped after it; in the classic
    layout an ordinary container that exits once it has reported the final status."""
    native = layout is PodLayout.NATIVE_SIDECAR
    # A native sidecar that exits is restarted, so it must stay up after the learner ends.
    config = {
        **learner.sidecar_config,
        "job_id": learner.job_id,
        "learner_id": learner.learner_id,
        "num_learners": learner.num_learners,
        "exit_when_done": not native,
        # shareProcessNamespace: learner.exit counts once the learner's processes are gone from /proc.
        "shares_learner_pid_namespace": True,
    }
    container: dict[str, Any] = {
        "name": SIDECAR_CONTAINER,
        "image": learner.sidecar_image,
        # Its own user: with shareProcessNamespace the learner could otherwise read its /proc/<pid>/environ.
        "securityContext": restricted_security_context(SIDECAR_UID),
        "resources": SIDECAR_RESOURCES,
        # A sidecar that dies before it can report leaves its log's end in its status (read for the job's reason).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": [
            *_env_list(
                {
                    "JOB_ID": learner.job_id,
                    "LEARNER_ID": str(learner.learner_id),
                    "NUM_LEARNERS": str(learner.num_learners),
                    "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(config, sort_keys=True),
                    # As for the learner: the pod's pause process is PID 1, so the sidecar's tini reaps as a subreaper.
                    "TINI_SUBREAPER": "1",
                }
            ),
            *_secret_env(job, learner),
        ],
        "ports": [{"name": "metrics", "containerPort": SIDECAR_METRICS_PORT}],
        "volumeMounts": [
            {"name": "job", "mountPath": JOB_DIR},
            {"name": "sidecar-tmp", "mountPath": "/tmp"},
            *_file_mounts(learner),
        ],
    }
    if native:
        container["restartPolicy"] = "Always"
    return container


def folders_container(learner: PairSpec) -> dict[str, Any]:
    """The first init container: it makes the job's folders group-writable before the sidecar or the learner
    starts. Neither may make them: ``learner-run`` makes ``/job/control`` as its own user, mode 0755, where the
    sidecar could then not write; and the kubelet goes on to the learner whenever the sidecar cannot start (a
    Secret its cache has not synced yet), which no order of the two containers prevents."""
    return {
        "name": FOLDERS_CONTAINER,
        "image": learner.sidecar_image,
        "command": ["mkdir", "-p", "-m", JOB_FOLDER_MODE, *sorted(DIR_DEFAULTS.values())],
        "securityContext": restricted_security_context(SIDECAR_UID),
        "resources": FOLDERS_RESOURCES,
        "volumeMounts": [{"name": "job", "mountPath": JOB_DIR}],
    }


def termination_grace_s(learner: PairSpec) -> int:
    """Kubelet stops the learner first, then the sidecar: both budgets must fit in the grace period."""
    return math.ceil(learner.halt_grace_s + learner.shutdown_deadline_s) + STOP_MARGIN_S


def _scheduling(learner: PairSpec, node: str | None) -> dict[str, Any]:
    """The GPU toleration, and a required node affinity (one term: its parts must all hold) on the GPU type and
    on the admitted node by name (``matchFields`` on ``metadata.name``, as the DaemonSet controller pins pods):
    kube-scheduler still checks the pod fits, but only there."""
    spec: dict[str, Any] = {}
    if learner.gpus:
        spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    term: dict[str, Any] = {}
    if learner.gpus and learner.gpu_type:
        term["matchExpressions"] = [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [learner.gpu_type]}]
    if node:
        term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": [node]}]
    if term:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    return spec


def learner_pod(job: JobDeployment, learner: PairSpec, layout: PodLayout = PodLayout.NATIVE_SIDECAR) -> KubeObject:
    labels = {
        **job_labels(job.job_id, job.instance),
        "app.kubernetes.io/component": "learner",
        LEARNER_LABEL: str(learner.learner_id),
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": termination_grace_s(learner),
        # The sidecar samples the learner's CPU and memory from /proc.
        "shareProcessNamespace": True,
        # No API token and no service variables: the learner sees nothing of the cluster.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": restricted_pod_security_context(LEARNER_UID),
        **_containers(job, learner, layout),
        "volumes": [
            # The manifest's storage bounds /job: the kubelet evicts the pod past it, before the node's disk fills.
            {"name": "job", "emptyDir": {"sizeLimit": str(learner.storage_bytes)} if learner.storage_bytes else {}},
            _shared_volume(job),
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
            {"name": "learner-tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
            {"name": "sidecar-tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
            *_files_volume(job, learner),
            # A mount_volume store: the folder the scheduler's LEARNERKIT_HOST_PATHS allowed, on every node.
            *(
                [{"name": "host-data", "hostPath": {"path": learner.data_mount, "type": "Directory"}}]
                if learner.data_mount
                else []
            ),
        ],
        **_scheduling(learner, job.nodes[learner.learner_id - 1] if job.nodes else None),
    }
    if job.networked:
        spec["hostname"] = learner.name
        spec["subdomain"] = job.name
        # The claim's files belong to group 0, which the learner (group 0) and the sidecar share.
        spec["securityContext"]["fsGroup"] = 0
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(learner.name, job.namespace, labels),
        "spec": spec,
    }


def _shared_volume(job: JobDeployment) -> dict[str, Any]:
    if not job.networked:
        return {"name": "shared", "emptyDir": {}}
    return {"name": "shared", "persistentVolumeClaim": {"claimName": job.shared_name}}


def shared_claim(job: JobDeployment) -> KubeObject:
    """The job folder of a multi-learner job: one ReadWriteMany claim every learner pod mounts."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": job.shared_size}}}
    if job.shared_storage_class:
        spec["storageClassName"] = job.shared_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(job.shared_name, job.namespace, job_labels(job.job_id, job.instance)),
        "spec": spec,
    }


def _containers(job: JobDeployment, learner: PairSpec, layout: PodLayout) -> dict[str, list[dict[str, Any]]]:
    folders, sidecar = folders_container(learner), sidecar_container(job, learner, layout)
    learner_part = learner_container(job, learner)
    if layout is PodLayout.NATIVE_SIDECAR:
        return {"initContainers": [folders, sidecar], "containers": [learner_part]}
    return {"initContainers": [folders], "containers": [sidecar, learner_part]}


def sidecar_secret(job: JobDeployment) -> KubeObject:
    """The credentials, as the sidecar's variables, and the sidecar's files (the package index's CA bundle), which
    it mounts; only the sidecar container references it. A Secret holds at most 1 MiB: the scheduler refuses at
    start a CA bundle that would not fit."""
    files = {secret_file_key(path): text for path, text in job.learners[0].sidecar_files.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(job.secret_name, job.namespace, job_labels(job.job_id, job.instance)),
        "type": "Opaque",
        "immutable": True,
        "stringData": {**job.learners[0].endpoints.env(), **files},
    }


def headless_service(job: JobDeployment) -> KubeObject:
    """DNS records ``lk-<job>-<n>.lk-<job>`` for every learner, published before they are ready."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(job.name, job.namespace, job_labels(job.job_id, job.instance)),
        "spec": {
            "clusterIP": "None",
            # Learners rendezvous before any of them could be called ready.
            "publishNotReadyAddresses": True,
            "selector": {JOB_LABEL: job.job_id, "app.kubernetes.io/component": "learner"},
            "ports": [{"name": "rendezvous", "port": job.master_port, "targetPort": job.master_port}],
        },
    }


def network_policy(job: JobDeployment) -> KubeObject:
    """Ingress only from the job's own pods (none for one learner); egress to DNS, peers, etcd and S3.

    A NetworkPolicy selects pods, not containers: the etcd/S3 egress is open to the learner container too.
    What keeps the learner from using it is that it holds no credential (the Secret is the sidecar's).
    """
    peers = [{"podSelector": {"matchLabels": {JOB_LABEL: job.job_id}}}]
    dns = {
        "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    egress: list[dict[str, Any]] = [dns]
    ingress: list[dict[str, Any]] = []
    if job.networked:
        ingress.append({"from": peers})
        egress.append({"to": peers})
    egress.extend(
        {"to": [{"ipBlock": {"cidr": target.cidr}}], "ports": [{"protocol": target.protocol, "port": target.port}]}
        for target in job.platform_egress
    )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(job.name, job.namespace, job_labels(job.job_id, job.instance)),
        "spec": {
            "podSelector": {"matchLabels": {JOB_LABEL: job.job_id}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def job_objects(job: JobDeployment, layout: PodLayout = PodLayout.NATIVE_SIDECAR) -> list[KubeObject]:
    """Every object of the job, in creation order: the Secret and the policy exist before any pod."""
    objects = [sidecar_secret(job), network_policy(job)]
    if job.networked:
        objects.extend((headless_service(job), shared_claim(job)))
    objects.extend(
        learner_pod(job, learner, layout) for learner in sorted(job.learners, key=lambda item: item.learner_id)
    )
    return objects


def describe(obj: KubeObject) -> str:
    """``Kind namespace/name``, the way errors name an object."""
    meta = obj.get("metadata", {})
    return f"{obj.get('kind', '?')} {meta.get('namespace', '?')}/{meta.get('name', '?')}"


def validate_objects(objects: Sequence[KubeObject], version: str = KUBERNETES_VERSION) -> None:
    """Validate each object against the strict schema of ``version``; the error names object and field."""
    for obj in objects:
        try:
            kubernetes_validate.validate(dict(obj), version, strict=True)
        except kubernetes_validate.utils.ValidationError as e:
            where = ".".join(str(part) for part in e.absolute_path) or "(top level)"
            raise InvalidObjectError(f"{describe(obj)}: {where}: {e.message} (Kubernetes {version})") from e
        except kubernetes_validate.utils.SchemaNotFoundError as e:
            raise InvalidObjectError(f"{describe(obj)}: no schema for it in Kubernetes {version}") from e
