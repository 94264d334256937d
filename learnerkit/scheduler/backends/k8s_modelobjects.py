"""A served model's Kubernetes objects as plain dicts: pure functions, no API calls (``k8s_modelservers.py`` sends
them; docs/kubernetes.md, "Serving a model").

Per served version a Pod of the model server image: an init container ``receive`` that waits, with nothing in it,
until the scheduler has streamed the version's verified files into an emptyDir (``kubectl exec``'s channel, so the
pod holds no credential of the registry or anything else), then the server, which mounts those files read-only
and answers ``/v2/health/ready`` (its readiness probe) once it has checked the signature and loaded the model. Per
served name a Service, its stable address, whose selector names one version: the scheduler moves it to a new
version's pod only once that pod is ready.

Model names run to 100 characters and labels to 63, so the objects carry a hash of ``tenant/name`` as a label (and
the exact tenant and name as annotations); the version label is the digest's first 32 hex digits.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from learnerkit.pair.spec import LEARNER_UID
from learnerkit.scheduler.backends.k8s_objects import (
    MANAGED_BY,
    KubeObject,
    restricted_pod_security_context,
    restricted_security_context,
)

PORT = 8080
RECEIVE_CONTAINER = "receive"
SERVER_CONTAINER = "server"
INCOMING = "/incoming"
"""The init container's mount of the files' emptyDir; the files arrive under ``files/``, then ``complete``."""
COMPLETE_FILE = "complete"
RECEIVE_DEADLINE_S = 600
"""How long ``receive`` waits for the files before it exits 1: a pod whose `serve` died shows the kubelet's back-off
(``Init:CrashLoopBackOff``) instead of an init container that looks busy."""
MODEL_LABEL = "learnerkit.io/model"
"""A hash of ``tenant/name``: which served model an object belongs to."""
VERSION_LABEL = "learnerkit.io/model-version"
TENANT_ANNOTATION = "learnerkit.io/tenant"
NAME_ANNOTATION = "learnerkit.io/model-name"
DIGEST_ANNOTATION = "learnerkit.io/model-digest"
PYTHON = "/opt/learner/venv/bin/python"
SERVER_RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
RECEIVE_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}
TMP_SIZE = "64Mi"

WAIT_FOR_FILES = f"""
import os, sys, time
deadline = time.monotonic() + {RECEIVE_DEADLINE_S}
while not os.path.exists("{INCOMING}/{COMPLETE_FILE}"):
    if time.monotonic() > deadline:
        sys.exit("no model files arrived within {RECEIVE_DEADLINE_S} s")
    time.sleep(0.2)
"""
RECEIVE_FILES = f"""
import os, sys, tarfile
left = int(sys.argv[1])
class Exact:
    def read(self, n=-1):
        global left
        data = sys.stdin.buffer.read(left if n < 0 else min(n, left)) if left else b""
        left -= len(data)
        return data
with tarfile.open(fileobj=Exact(), mode="r|") as archive:
    for member in archive:
        parts = member.name.split("/")
        if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
            sys.exit("refused: " + member.name)
        archive.extract(member, "{INCOMING}/files", set_attrs=False)
if left:
    sys.exit(str(left) + " bytes were not read")
open("{INCOMING}/{COMPLETE_FILE}", "w").close()
"""
"""Run in ``receive`` by the scheduler, the tar's size as its argument: the version's files (``model/``) and the
platform's public keys (``keys/``), regular files and folders only, then the file that lets the init end."""


def model_key(tenant: str, name: str) -> str:
    return hashlib.sha256(f"{tenant}/{name}".encode()).hexdigest()[:16]


def service_name(tenant: str, name: str) -> str:
    """The name's Service: a DNS label (``lk-model-`` + the name, readable, + the key), at most 56 characters."""
    return f"lk-model-{re.sub(r'[^a-z0-9]+', '-', name)[:30].strip('-')}-{model_key(tenant, name)}"


def version_label(digest: str) -> str:
    return digest.removeprefix("sha256:")[:32]


def pod_name(tenant: str, name: str, digest: str) -> str:
    return f"{service_name(tenant, name)}-{version_label(digest)[:12]}"


def model_labels(tenant: str, name: str) -> dict[str, str]:
    """What every object of a served name carries; ``learnerkit.io/model`` is what `model stop` selects on."""
    return {
        "app.kubernetes.io/name": "learnerkit-modelserver",
        "app.kubernetes.io/part-of": "learnerkit",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/component": "model-server",
        MODEL_LABEL: model_key(tenant, name),
    }


def model_selector(tenant: str, name: str) -> str:
    return f"{MODEL_LABEL}={model_key(tenant, name)},app.kubernetes.io/managed-by={MANAGED_BY}"


def _annotations(tenant: str, name: str) -> dict[str, str]:
    return {TENANT_ANNOTATION: tenant, NAME_ANNOTATION: name}


def server_pod(tenant: str, name: str, digest: str, image: str, namespace: str, key_files: Sequence[str]) -> KubeObject:
    """The pod of one served version; ``key_files``: the public keys' file names, as they arrive under ``keys/``."""
    key_args = [arg for key in key_files for arg in ("--public-key", f"/keys/{key}")]
    server_args = ["--model-dir", "/model", *key_args, "--name", name, "--version", digest, "--port", str(PORT)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(tenant, name, digest),
            "namespace": namespace,
            "labels": {**model_labels(tenant, name), VERSION_LABEL: version_label(digest)},
            "annotations": {**_annotations(tenant, name), DIGEST_ANNOTATION: digest},
        },
        "spec": {
            # The server container is restarted in place (its files stay in the emptyDir); the pod is never remade
            # behind the scheduler's back: a new pod would wait for files nobody sends.
            "restartPolicy": "Always",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": restricted_pod_security_context(LEARNER_UID),
            "initContainers": [
                {
                    "name": RECEIVE_CONTAINER,
                    "image": image,
                    "command": [PYTHON, "-c", WAIT_FOR_FILES],
                    "securityContext": restricted_security_context(LEARNER_UID),
                    "resources": RECEIVE_RESOURCES,
                    "volumeMounts": [{"name": "files", "mountPath": INCOMING}],
                }
            ],
            "containers": [
                {
                    "name": SERVER_CONTAINER,
                    "image": image,
                    "command": ["/usr/bin/tini", "--", PYTHON, "/opt/learner/server/serve.py"],
                    "args": server_args,
                    "ports": [{"name": "http", "containerPort": PORT}],
                    "readinessProbe": {
                        "httpGet": {"path": "/v2/health/ready", "port": PORT},
                        "periodSeconds": 2,
                        "timeoutSeconds": 2,
                        "failureThreshold": 3,
                    },
                    "securityContext": restricted_security_context(LEARNER_UID),
                    "resources": SERVER_RESOURCES,
                    "volumeMounts": [
                        {"name": "files", "mountPath": "/model", "subPath": "files/model", "readOnly": True},
                        {"name": "files", "mountPath": "/keys", "subPath": "files/keys", "readOnly": True},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [{"name": "files", "emptyDir": {}}, {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}}],
        },
    }


def model_service(tenant: str, name: str, digest: str, namespace: str) -> KubeObject:
    """The name's stable address; its selector names the version ``digest``'s pod."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(tenant, name),
            "namespace": namespace,
            "labels": model_labels(tenant, name),
            "annotations": _annotations(tenant, name),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": version_selector(tenant, name, digest),
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def model_policy(tenant: str, name: str, namespace: str) -> KubeObject:
    """No egress for the name's pods (the server needs nothing: its files are sent in), ingress to its port."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": service_name(tenant, name),
            "namespace": namespace,
            "labels": model_labels(tenant, name),
            "annotations": _annotations(tenant, name),
        },
        "spec": {
            "podSelector": {"matchLabels": {MODEL_LABEL: model_key(tenant, name)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": PORT}]}],
            "egress": [],
        },
    }


def version_selector(tenant: str, name: str, digest: str) -> dict[str, str]:
    return {MODEL_LABEL: model_key(tenant, name), VERSION_LABEL: version_label(digest)}


def service_url(tenant: str, name: str, namespace: str) -> str:
    """The address `model serve` prints: the Service's cluster DNS name (kept across roll-overs)."""
    return f"http://{service_name(tenant, name)}.{namespace}.svc:{PORT}"
