"""The control plane's parts as the cluster starts them: service-account keys, the users' tokens, and the
command lines of kube-apiserver, kube-scheduler and kube-controller-manager (on 127.0.0.1, token auth)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from learnerkit.dev.k8scluster.binaries import Binaries
from learnerkit.dev.k8scluster.host import run

NODE_NAME = "lk-node-1"
NODE_SLOTS = 3
"""How many nodes the cluster can have: the API server reads the nodes' tokens once, when it starts."""


def make_keys(workdir: Path) -> None:
    """The service accounts' signing key pair (``sa.key``, ``sa.pub``)."""
    key, pub = workdir / "sa.key", workdir / "sa.pub"
    run("openssl", "genrsa", "-out", str(key), "2048")
    run("openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub))


def token_users() -> dict[str, tuple[str, str]]:
    """Each token's name -> the user and group the API server gives it (every node's, for ``NODE_SLOTS``)."""
    return {
        "admin": ("admin", "system:masters"),
        "node": (f"system:node:{NODE_NAME}", "system:nodes"),
        "scheduler": ("system:kube-scheduler", ""),
        "controllers": ("system:kube-controller-manager", ""),
        **{f"node-{n}": (f"system:node:lk-node-{n}", "system:nodes") for n in range(2, NODE_SLOTS + 1)},
    }


def apiserver_argv(
    binaries: Binaries, workdir: Path, etcd_endpoint: str, api_port: int, gateway: str, subnet: ipaddress.IPv4Network
) -> list[str]:
    return [
        binaries.tool("kube-apiserver"),
        f"--etcd-servers=http://{etcd_endpoint}",
        "--bind-address=127.0.0.1",
        f"--secure-port={api_port}",
        "--insecure-port=0",
        f"--advertise-address={gateway}",
        "--endpoint-reconciler-type=none",
        f"--cert-dir={workdir / 'apiserver-certs'}",
        f"--token-auth-file={workdir / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-key-file={workdir / 'sa.pub'}",
        f"--service-account-signing-key-file={workdir / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc",
        "--disable-admission-plugins=ServiceAccount",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-cluster-ip-range=10.223.{subnet.network_address.packed[2]}.0/24",
        "--kubelet-preferred-address-types=InternalIP",
        "--v=1",
    ]


def scheduler_argv(binaries: Binaries, workdir: Path, port: int) -> list[str]:
    return [
        binaries.tool("kube-scheduler"),
        f"--kubeconfig={workdir / 'scheduler.kubeconfig'}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--port=0",
        "--v=1",
    ]


def controllers_argv(binaries: Binaries, workdir: Path, port: int) -> list[str]:
    """kube-controller-manager with the volume binder alone: it binds claims to volumes (the node's taint, which
    its node lifecycle controller would lift, is lifted by the cluster)."""
    return [
        binaries.tool("kube-controller-manager"),
        f"--kubeconfig={workdir / 'controllers.kubeconfig'}",
        "--controllers=persistentvolume-binder",
        "--use-service-account-credentials=false",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--port=0",
        "--v=1",
    ]
