"""The pool of static ReadWriteMany volumes multi-learner jobs' shared claims bind to (one node: a host folder is
shared storage), as a cluster's RWX storage would serve them."""

from __future__ import annotations

import os
from pathlib import Path

from learnerkit.dev.k8scluster.api import AdminApi

SHARED_CLASS = "lk-shared"
"""The storage class of the static volumes the jobs' shared claims bind to (``LEARNERKIT_K8S_SHARED_STORAGE_CLASS``)."""
SHARED_VOLUMES = 4
LEARNER_UID = 1000


def make_shared_volumes(api: AdminApi, folder: Path, suffix: str) -> None:
    """Static ReadWriteMany volumes of a class without a provisioner, folders the learner (uid 1000, group 0)
    may write; kept, not recycled, when their claim goes (each binds once). The controller manager's user
    gets the volume binder's role, and nothing more."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "lk-volume-binder"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:controller:persistent-volume-binder",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:kube-controller-manager"}
        ],
    }
    api.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, "application/json")
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": SHARED_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
    }
    api.request("POST", "/apis/storage.k8s.io/v1/storageclasses", storage_class, "application/json")
    for n in range(1, SHARED_VOLUMES + 1):
        path = folder / f"pv-{n}"
        path.mkdir(parents=True)
        os.chown(path, LEARNER_UID, 0)
        path.chmod(0o2775)
        volume: dict[str, object] = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"lk-shared-{suffix}-{n}"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": SHARED_CLASS,
                "hostPath": {"path": str(path), "type": "Directory"},
            },
        }
        api.request("POST", "/api/v1/persistentvolumes", volume, content_type="application/json")
