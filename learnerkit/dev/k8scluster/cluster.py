"""A real Kubernetes cluster on this machine, from the binaries ``scripts/k8s-binaries.sh`` built: the tier
``tests/k8s`` and ``bench/k8s_start.py`` run on it (it needs root: the kubelet and containerd do). It starts with
one node; ``add_node`` adds another, with a kubelet of its own in a network namespace of its own
(``learnerkit/dev/k8snode.py``).

etcd, kube-apiserver (token auth, RBAC + Node authorizer, service-account keys from ``openssl``),
kube-scheduler and kube-controller-manager (only its volume binder) listen on 127.0.0.1; a private containerd
(own root, state, socket and runc root) and the kubelet make the node. The node's address is the gateway of a
bridge this code creates (a private /24, no route off the machine, no masquerade): the kubelet refuses a
loopback node IP, and pods reach the host's etcd and S3 through forwarders on that gateway. The kubelet's pods
live under a cgroup root of their own. Multi-learner jobs' ReadWriteMany claims bind to a pool of static
hostPath volumes of the class ``SHARED_CLASS`` (one node: a host folder is shared storage), as a cluster's RWX
storage would serve them.
``stop()`` removes every pod, process, mount, cgroup, namespace, bridge and file the cluster made.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learnerkit.common.project import find_project_root
from learnerkit.dev.etcd import EtcdServer, etcd_binary
from learnerkit.dev.k8snode import (
    KUBELET_PORT,
    NODE_ADDRESS_OFFSET,
    NodeSpec,
    cni_config,
    containerd_config,
    kubelet_config,
    write_json,
)
from learnerkit.dev.polling import poll_until
from learnerkit.dev.ports import free_ports

BUILD_SCRIPT = "scripts/k8s-binaries.sh"
NOT_YET = (OSError, RuntimeError, ValueError, LookupError)
"""What a part not up yet (or gone already) answers: a refused connection, a failed tool, a short reply."""
NODE_NAME = "lk-node-1"
NODE_SLOTS = 3
"""How many nodes the cluster can have: the API server reads the nodes' tokens once, when it starts."""
START_TIMEOUT_S = 120.0
CGROUP_FS = Path("/sys/fs/cgroup")
NETNS = Path("/var/run/netns")
SHARED_CLASS = "lk-shared"
"""The storage class of the static volumes the jobs' shared claims bind to (``LEARNERKIT_K8S_SHARED_STORAGE_CLASS``)."""
SHARED_VOLUMES = 4
LEARNER_UID = 1000
POD_PIDS_LIMIT = 4096
"""The kubelet caps each pod's processes and threads: Kubernetes has no per-container pids limit (docs/security.md)."""


def _netns() -> set[str]:
    return {p.name for p in NETNS.iterdir()} if NETNS.is_dir() else set()


@dataclass(frozen=True)
class Binaries:
    """The cached build: ``bin/{kube-apiserver,kube-controller-manager,kubelet,kube-scheduler,kubectl}``,
    ``pause.tar``."""

    root: Path

    def tool(self, name: str) -> str:
        return str(self.root / "bin" / name)

    @property
    def pause_archive(self) -> Path:
        return self.root / "pause.tar"

    @property
    def pause_ref(self) -> str:
        return (self.root / "pause.ref").read_text().strip()


def cached_binaries() -> Binaries | None:
    """The cached build, or None when ``scripts/k8s-binaries.sh`` has not built it yet (nothing is built here)."""
    script = find_project_root() / BUILD_SCRIPT
    done = subprocess.run([str(script), "--print-dir"], capture_output=True, text=True, check=False)
    return Binaries(Path(done.stdout.strip())) if done.returncode == 0 else None


def _subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.222.0.0/16 that no interface or route of this machine uses yet."""
    used = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.222.{secrets.randbelow(256)}.0/24")
        if str(net) not in used and f"{net.network_address + 1}" not in used:
            return net
    raise RuntimeError("no free /24 left in 10.222.0.0/16")


class _Forwarder:
    """TCP forwarding from ``listen`` (the bridge gateway) to a loopback port, so pods reach host servers."""

    def __init__(self, host: str, target_port: int) -> None:
        self.server = socket.create_server((host, 0))
        self.port = int(self.server.getsockname()[1])
        self.target_port = target_port
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        self.server.close()


class _PodDns:
    """DNS on the gateway for what CoreDNS would answer here: ``<hostname>.<subdomain>.<namespace>.svc.cluster.local``
    (a pod's record under its headless Service) from the pods' API objects; NXDOMAIN for everything else."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((cluster.gateway, 53))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:
                return
            with contextlib.suppress(*NOT_YET):
                self.sock.sendto(self._answer(query), peer)

    def _answer(self, query: bytes) -> bytes:
        ident = query[:2]
        labels, pos = [], 12
        while query[pos]:
            labels.append(query[pos + 1 : pos + 1 + query[pos]].decode().lower())
            pos += 1 + query[pos]
        qtype = int.from_bytes(query[pos + 1 : pos + 3], "big")
        question = query[12 : pos + 5]
        address = self._lookup(labels)
        if address is None:
            return ident + b"\x81\x83\x00\x01\x00\x00\x00\x00\x00\x00" + question
        if qtype != 1:
            return ident + b"\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00" + question
        record = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04" + socket.inet_aton(address)
        return ident + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00" + question + record

    def _lookup(self, labels: list[str]) -> str | None:
        if len(labels) != 6 or labels[3:] != ["svc", "cluster", "local"]:
            return None
        hostname, subdomain, namespace = labels[:3]
        pods = self.cluster.get(f"/api/v1/namespaces/{namespace}/pods").get("items", [])
        assert isinstance(pods, list)
        for pod in pods:
            spec, status = pod.get("spec", {}), pod.get("status", {})
            if spec.get("hostname") == hostname and spec.get("subdomain") == subdomain and status.get("podIP"):
                return str(status["podIP"])
        return None

    def close(self) -> None:
        self.sock.close()


@dataclass
class LocalCluster:
    """Start with ``start()``, always ``stop()``; ``kubeconfig`` is the admin's (token in system:masters)."""

    binaries: Binaries
    workdir: Path
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    forwarders: list[_Forwarder] = field(default_factory=list)
    etcd: EtcdServer | None = None
    dns: _PodDns | None = None
    started_s: float = 0.0
    _api_forward: int | None = None

    def __post_init__(self) -> None:
        self.subnet = _subnet()
        self.gateway = str(self.subnet.network_address + 1)
        self.bridge = f"lkk8s{self.suffix}"
        self.api_port, self.scheduler_port, kubelet_port, self.controllers_port = free_ports(4)
        nodes = [f"node-{n}" for n in range(2, NODE_SLOTS + 1)]
        self.tokens = {name: secrets.token_hex(16) for name in ("admin", "node", "scheduler", "controllers", *nodes)}
        cgroup_root = f"/lk-k8s-{self.suffix}"
        first = NodeSpec(NODE_NAME, 1, self.workdir, self.gateway, self.subnet, cgroup_root, kubelet_port, self.subnet)
        self.nodes: dict[str, NodeSpec] = {NODE_NAME: first}
        """Every node the cluster runs, the first one first (``add_node`` adds the others)."""
        self.made: dict[str, NodeSpec] = dict(self.nodes)
        """Every node the cluster ever ran, removed ones too: what ``leftovers`` checks."""
        self.images: list[str] = []
        """What ``import_images`` imported: a node added later gets them too."""
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.pod_uids: set[str] = set()
        self.netns_before = _netns()

    @property
    def first(self) -> NodeSpec:
        return self.nodes[NODE_NAME]

    # --- start ---------------------------------------------------------------------------------------
    def start(self) -> None:
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._bridge_up()
        self._keys()
        self.etcd = EtcdServer(etcd_binary(), self.workdir / "etcd" / "data")
        self.etcd.start()
        self._apiserver()
        self._scheduler()
        self._controllers()
        self._shared_volumes()
        self.dns = _PodDns(self)
        self._node_up(self.first)
        self.started_s = time.monotonic() - began

    def _node_up(self, node: NodeSpec) -> None:
        """The node's containerd (with the pause image), cgroup root and kubelet, until the node is Ready."""
        self._containerd(node)
        self.import_archive(self.binaries.pause_archive, node)
        self._cgroup_root(node)
        self._kubelet(node)
        self._wait(lambda: self.node_ready(node.name), f"node {node.name} to be Ready", node.process("kubelet"))
        # The node lifecycle controller (kube-controller-manager, not run here) would lift this taint.
        self.kubectl("taint", "nodes", node.name, "node.kubernetes.io/not-ready-")

    def _run(self, *argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def _bridge_up(self) -> None:
        self._run("ip", "link", "add", "name", self.bridge, "type", "bridge")
        self._run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        self._run("ip", "link", "set", self.bridge, "up")
        # Pod-to-pod traffic crosses the host's FORWARD chain (br_netfilter), whose policy Docker sets to DROP.
        self._run("iptables", "-I", "FORWARD", "1", *self._forward_rule)

    @property
    def _forward_rule(self) -> tuple[str, ...]:
        return ("-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")

    def _keys(self) -> None:
        key, pub = self.workdir / "sa.key", self.workdir / "sa.pub"
        self._run("openssl", "genrsa", "-out", str(key), "2048")
        self._run("openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub))
        users = {
            "admin": ("admin", "system:masters"),
            "node": (f"system:node:{NODE_NAME}", "system:nodes"),
            "scheduler": ("system:kube-scheduler", ""),
            "controllers": ("system:kube-controller-manager", ""),
            **{f"node-{n}": (f"system:node:lk-node-{n}", "system:nodes") for n in range(2, NODE_SLOTS + 1)},
        }
        lines = [f'{self.tokens[who]},{user},{who},"{group}"' for who, (user, group) in users.items()]
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        for who in users:
            self._write_kubeconfig(self.workdir / f"{who}.kubeconfig", self.tokens[who])

    def _write_kubeconfig(self, path: Path, token: str, server: str | None = None) -> None:
        """A kubeconfig with ``token`` for ``server`` (the API server's own address unless given); once the API
        server has made its self-signed certificate (the file holds its CA too), clients verify the server against
        it."""
        ca = self.workdir / "apiserver-certs" / "apiserver.crt"
        trust: dict[str, object] = (
            {"certificate-authority": str(ca)} if ca.exists() else {"insecure-skip-tls-verify": True}
        )
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lk", "cluster": {"server": server or self.server, **trust}}],
            "users": [{"name": "lk", "user": {"token": token}}],
            "contexts": [{"name": "lk", "context": {"cluster": "lk", "user": "lk"}}],
            "current-context": "lk",
        }
        path.write_text(json.dumps(config))

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env or {"PATH": os.environ["PATH"]}, start_new_session=True
        )

    def _wait(self, ready: object, what: str, process: str) -> None:
        assert callable(ready)

        outcome: list[str] = []

        def ended() -> bool:
            proc = self.processes.get(process)
            if proc is not None and proc.poll() is not None:
                outcome.append("exited")
            with contextlib.suppress(*NOT_YET):
                if ready():
                    outcome.append("ready")
            return bool(outcome)

        if poll_until(ended, timeout=START_TIMEOUT_S, interval=0.2) and outcome[-1] == "ready":
            return
        tail = (self.workdir / f"{process}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{process} exited or timed out waiting for {what}; {process}.log ends:\n{tail}")

    def get(self, path: str) -> dict[str, object]:
        """GET an API path as the admin (JSON)."""
        return self.request("GET", path)

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, object] | None = None,
        content_type: str = "application/merge-patch+json",
    ) -> dict[str, object]:
        """Call the API as the admin; a body goes as a JSON merge patch unless ``content_type`` says otherwise."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        headers = {"Authorization": f"Bearer {self.tokens['admin']}", "Content-Type": content_type}
        data = json.dumps(body).encode() if body is not None else None
        url = self.server + path  # https://127.0.0.1:<port>: this cluster's own API server
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - https only
        with urllib.request.urlopen(request, context=context, timeout=5) as answer:  # noqa: S310 - https only
            text = answer.read()
        try:
            loaded = json.loads(text)
        except ValueError:
            return {"text": text.decode()}
        return loaded if isinstance(loaded, dict) else {"value": loaded}

    def _apiserver(self) -> None:
        assert self.etcd is not None
        self._spawn(
            "kube-apiserver",
            [
                self.binaries.tool("kube-apiserver"),
                f"--etcd-servers=http://{self.etcd.endpoint}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                "--insecure-port=0",
                f"--advertise-address={self.gateway}",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={self.workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-cluster-ip-range=10.223.{self.subnet.network_address.packed[2]}.0/24",
                "--kubelet-preferred-address-types=InternalIP",
                "--v=1",
            ],
        )
        self._wait(lambda: self.get("/readyz").get("text") == "ok", "kube-apiserver /readyz", "kube-apiserver")
        for who, token in self.tokens.items():
            self._write_kubeconfig(self.workdir / f"{who}.kubeconfig", token)

    def _scheduler(self) -> None:
        self._spawn(
            "kube-scheduler",
            [
                self.binaries.tool("kube-scheduler"),
                f"--kubeconfig={self.workdir / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                "--port=0",
                "--v=1",
            ],
        )

    def _controllers(self) -> None:
        """kube-controller-manager with the volume binder alone: it binds claims to volumes (the node's
        taint, which its node lifecycle controller would lift, is lifted by ``start``)."""
        self._spawn(
            "kube-controller-manager",
            [
                self.binaries.tool("kube-controller-manager"),
                f"--kubeconfig={self.workdir / 'controllers.kubeconfig'}",
                "--controllers=persistentvolume-binder",
                "--use-service-account-credentials=false",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.controllers_port}",
                "--port=0",
                "--v=1",
            ],
        )

    def _shared_volumes(self) -> None:
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
        self.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, "application/json")
        storage_class = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": SHARED_CLASS},
            "provisioner": "kubernetes.io/no-provisioner",
        }
        self.request("POST", "/apis/storage.k8s.io/v1/storageclasses", storage_class, "application/json")
        for n in range(1, SHARED_VOLUMES + 1):
            folder = self.workdir / "shared" / f"pv-{n}"
            folder.mkdir(parents=True)
            os.chown(folder, LEARNER_UID, 0)
            folder.chmod(0o2775)
            volume: dict[str, object] = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"lk-shared-{self.suffix}-{n}"},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": SHARED_CLASS,
                    "hostPath": {"path": str(folder), "type": "Directory"},
                },
            }
            self.request("POST", "/api/v1/persistentvolumes", volume, content_type="application/json")

    def _containerd(self, node: NodeSpec) -> None:
        root = node.folder / "containerd"
        write_json(
            node.folder / "cni" / "10-learnerkit.conflist",
            cni_config(node, self.bridge, f"lk-k8s-{self.suffix}-{node.index}"),
        )
        root.mkdir(parents=True, exist_ok=True)
        (root / "config.toml").write_text(containerd_config(node, self.binaries.pause_ref))
        name = node.process("containerd")
        self._spawn(name, [*node.nsenter(), "containerd", "--config", str(root / "config.toml")])
        self._wait(lambda: self._ctr("version", node=node) is not None, "containerd's socket", name)

    def _ctr(self, *args: str, node: NodeSpec | None = None) -> str:
        return self._run("ctr", "--address", str((node or self.first).containerd_socket), "-n", "k8s.io", *args)

    def import_archive(self, archive: Path, node: NodeSpec | None = None) -> None:
        self._ctr("images", "import", "--no-unpack", str(archive), node=node)

    def import_images(self, *refs: str) -> None:
        """``docker save`` of each image, imported into every node's containerd (no registry involved); a node
        added later gets them too."""
        for node in self.nodes.values():
            self._import_into(node, refs)
        self.images += [ref for ref in refs if ref not in self.images]

    @staticmethod
    def _import_into(node: NodeSpec, refs: Iterable[str]) -> None:
        for ref in refs:
            save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
            done = subprocess.run(
                ["ctr", "--address", str(node.containerd_socket), "-n", "k8s.io", "images", "import", "-"],
                stdin=save.stdout,
                capture_output=True,
                text=True,
                check=False,
            )
            assert save.stdout is not None
            save.stdout.close()
            if save.wait() != 0 or done.returncode != 0:
                raise RuntimeError(f"importing {ref} into node {node.name}: {done.stderr.strip()}")

    @staticmethod
    def _cgroup_root(node: NodeSpec) -> None:
        """The kubelet's cgroup root in every v1 hierarchy (it must exist); cpuset needs its CPUs and nodes."""
        for hierarchy in CGROUP_FS.iterdir():
            if hierarchy.is_symlink() or not hierarchy.is_dir():
                continue
            top = hierarchy / node.cgroup_root.lstrip("/")
            top.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / name).exists():
                    (top / name).write_text((hierarchy / name).read_text())

    def _kubelet(self, node: NodeSpec) -> None:
        kubelet = node.folder / "kubelet"
        resolv = self.workdir / "resolv.conf"
        resolv.write_text(f"nameserver {self.gateway}\n")
        write_json(kubelet / "config.json", kubelet_config(node, self.gateway, resolv, POD_PIDS_LIMIT))
        token = "node" if node.first else f"node-{node.index}"
        kubeconfig = self.workdir / f"{token}.kubeconfig"
        if not node.first:  # the API server listens on the host's loopback: the node reaches it on the gateway
            self._write_kubeconfig(kubeconfig, self.tokens[token], f"https://{self.gateway}:{self.api_gateway_port}")
        self._spawn(
            node.process("kubelet"),
            [
                *node.nsenter(),
                self.binaries.tool("kubelet"),
                f"--config={kubelet / 'config.json'}",
                f"--kubeconfig={kubeconfig}",
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{node.containerd_socket}",
                f"--root-dir={node.kubelet_root}",
                f"--cert-dir={kubelet / 'pki'}",
                f"--hostname-override={node.name}",
                f"--node-ip={node.address}",
                "--v=1",
            ],
        )

    @property
    def api_gateway_port(self) -> int:
        """A port on the gateway forwarded to the API server (for the kubelets in namespaces of their own)."""
        if self._api_forward is None:
            self._api_forward = self.forward(self.api_port)
        return self._api_forward

    def node_ready(self, name: str) -> bool:
        node = self.get(f"/api/v1/nodes/{name}")
        status: Any = node.get("status", {})
        conditions = status.get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def forward(self, target_port: int) -> int:
        """A port on the gateway that pods can reach, forwarded to ``127.0.0.1:target_port``."""
        forwarder = _Forwarder(self.gateway, target_port)
        self.forwarders.append(forwarder)
        return forwarder.port

    def patch_node_status(self, patch: dict[str, object], name: str = NODE_NAME) -> None:
        """Merge ``patch`` into the node's status (kubectl 1.20 has no ``--subresource``): e.g. fake GPUs."""
        self.request("PATCH", f"/api/v1/nodes/{name}/status", patch)

    def kubectl(self, *args: str) -> str:
        return self._run(self.binaries.tool("kubectl"), f"--kubeconfig={self.kubeconfig}", *args)

    # --- node changes --------------------------------------------------------------------------------
    def add_node(self) -> str:
        """Another node with a kubelet of its own, in a network namespace of its own (a veth into the cluster
        bridge gives it an address there), with its own containerd, kubelet folders, cgroup root and pod subnet
        (routed from the host through its address), and the images ``import_images`` imported. Its name."""
        index = len(self.nodes) + 1
        if index > NODE_SLOTS:
            raise RuntimeError(f"the cluster has room for {NODE_SLOTS} nodes (the API server's tokens)")
        address = str(self.subnet.network_address + NODE_ADDRESS_OFFSET + index)
        folder = self.workdir / f"node-{index}"
        cgroup_root = f"/lk-k8s-{self.suffix}-{index}"
        node = NodeSpec(f"lk-node-{index}", index, folder, address, _subnet(), cgroup_root, KUBELET_PORT, self.subnet)
        self.nodes[node.name] = self.made[node.name] = node
        self._network(node)
        self._node_up(node)
        self._import_into(node, self.images)
        return node.name

    def _network(self, node: NodeSpec) -> None:
        """The node's namespace, its veth into the cluster bridge with its address, and the host's route to its
        pods (their replies from the gateway's forwarders and DNS go back that way)."""
        assert node.netns is not None
        veth = self._veth(node)
        in_ns = ["ip", "-n", node.netns]
        self._run("ip", "netns", "add", node.netns)
        self._run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
        self._run("ip", "link", "set", veth, "master", self.bridge, "up")
        self._run(*in_ns, "addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", "eth0")
        self._run(*in_ns, "link", "set", "eth0", "up")
        self._run(*in_ns, "link", "set", "lo", "up")
        self._run("ip", "netns", "exec", node.netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        self._run("ip", "route", "add", str(node.pod_subnet), "via", node.address, "dev", self.bridge)
        self._mount_namespace(node)

    def _mount_namespace(self, node: NodeSpec) -> None:
        """The node's mount namespace, kept by a file in a private mount (a namespace file may not sit in a shared
        one), with the node's own pod log folders bound over the host's."""
        keep = node.mount_namespace.parent
        keep.mkdir(parents=True)
        self._run("mount", "--bind", str(keep), str(keep))
        self._run("mount", "--make-private", str(keep))
        node.mount_namespace.touch()
        self._run("unshare", f"--mount={node.mount_namespace}", "--propagation", "slave", "true")
        for target in (Path("/var/log/pods"), Path("/var/log/containers")):
            own = node.folder / "logs" / target.name
            own.mkdir(parents=True)
            target.mkdir(parents=True, exist_ok=True)
            self._run("nsenter", f"--mount={node.mount_namespace}", "--", "mount", "--bind", str(own), str(target))

    def _veth(self, node: NodeSpec) -> str:
        """The host's end of the node's veth (in the cluster bridge)."""
        return f"lkv{self.suffix}{node.index}"

    def remove_node(self, name: str) -> None:
        """A node ``add_node`` made, gone with everything of it: its pods, processes, mounts, cgroups, namespace,
        route and Node object."""
        node = self.nodes.pop(name)
        with contextlib.suppress(*NOT_YET):
            self._note_pods(name)
            self._force_delete_pods_on(name)
            if node.process("kubelet") in self.processes:  # it tears its pods' networks down
                poll_until(lambda: not self._sandboxes(node), timeout=60, interval=0.5)
        self._stop_node(node)
        with contextlib.suppress(*NOT_YET):
            self.kubectl("delete", "node", name, "--ignore-not-found")
        self._remove_pod_logs()

    def _note_pods(self, name: str) -> None:
        """Remember the node's pods, whose log folders ``stop`` removes where no kubelet did."""
        pods = self.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{name}").get("items", [])
        assert isinstance(pods, list)
        self.pod_uids.update(pod["metadata"]["uid"] for pod in pods)

    def _stop_node(self, node: NodeSpec) -> None:
        self._terminate(node.process("kubelet"))
        with contextlib.suppress(*NOT_YET):
            self._kill_tasks(node)
        self._terminate(node.process("containerd"))
        self._remove_cgroups(node)
        if node.netns is not None:
            # Its mounts (volumes, snapshots, pod namespaces, log folders) live in its mount namespace: they go
            # with it once the file that keeps it is unmounted and its processes are gone.
            self._unmount_below(node.mount_namespace.parent)
            subprocess.run(["ip", "route", "delete", str(node.pod_subnet)], capture_output=True, check=False)
            subprocess.run(["ip", "link", "delete", self._veth(node)], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "delete", node.netns], capture_output=True, check=False)
            shutil.rmtree(node.folder, ignore_errors=True)

    def lose_node(self, name: str = NODE_NAME) -> None:
        """The node as a machine that went down: its kubelet killed and its pods' processes with it, its Ready
        condition ``Unknown`` as the node lifecycle controller (not run here) sets it once the kubelet stops
        posting. ``restore_node`` brings it back."""
        node = self.nodes[name]
        self._note_pods(name)
        proc = self.processes.pop(node.process("kubelet"))
        proc.kill()
        proc.wait(timeout=10)
        self._kill_tasks(node)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        unknown = {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"conditions": [unknown]}},
            "application/strategic-merge-patch+json",
        )

    def restore_node(self, name: str = NODE_NAME) -> None:
        """The kubelet started again on its folders: it posts the node Ready and removes the pods deleted
        meanwhile."""
        node = self.nodes[name]
        self._kubelet(node)
        self._wait(lambda: self.node_ready(name), f"node {name} to be Ready again", node.process("kubelet"))

    def register_node(self, name: str, allocatable: Mapping[str, str]) -> None:
        """A Node object with no kubelet behind it, Ready with ``allocatable`` (e.g. ``{"cpu": "8"}``): what the
        scheduler and kube-scheduler see of a second node. Its pods never run; ``forget_node`` removes it."""
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        self.request("POST", "/api/v1/nodes", node, "application/json")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {"type": "Ready", "status": "True", "reason": "Registered", "lastTransitionTime": now}
        status = {"capacity": dict(allocatable), "allocatable": dict(allocatable), "conditions": [ready]}
        self.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": status})
        # The API server taints every new node not-ready; the node lifecycle controller (not run here) lifts it.
        self.kubectl("taint", "nodes", name, "node.kubernetes.io/not-ready-")

    def _force_delete_pods_on(self, name: str) -> None:
        """Every pod bound to node ``name`` deleted with no grace, not waiting for a kubelet to confirm."""
        self.kubectl(
            "delete",
            "pods",
            "--all-namespaces",
            f"--field-selector=spec.nodeName={name}",
            "--force",
            "--grace-period=0",
            "--wait=false",
        )

    def forget_node(self, name: str) -> None:
        """The registered node and its pods removed at once (no kubelet is there to confirm a deletion)."""
        self._force_delete_pods_on(name)
        self.kubectl("delete", "node", name, "--ignore-not-found")

    # --- stop ----------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Remove everything: pods (so the kubelet tears their networks down), processes, mounts, cgroups."""
        with contextlib.suppress(*NOT_YET):
            self._delete_pods()
        for node in reversed(list(self.nodes.values())):
            if not node.first:
                self._stop_node(node)
        for name in ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-apiserver"):
            self._terminate(name)
        with contextlib.suppress(*NOT_YET):
            self._kill_tasks(self.first)
        self._terminate("containerd")
        if self.etcd is not None:
            self.etcd.stop()
        for forwarder in self.forwarders:
            forwarder.close()
        if self.dns is not None:
            self.dns.close()
        self._unmount_below(self.workdir)
        self._remove_cgroups(self.first)
        for name in _netns() - self.netns_before:
            if name.startswith("cni-"):
                subprocess.run(["umount", str(NETNS / name)], capture_output=True, check=False)
                (NETNS / name).unlink(missing_ok=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        subprocess.run(["iptables", "-D", "FORWARD", *self._forward_rule], capture_output=True, check=False)
        self._remove_pod_logs()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _delete_pods(self) -> None:
        pods = self.get("/api/v1/pods").get("items", [])
        assert isinstance(pods, list)
        self.pod_uids.update(pod["metadata"]["uid"] for pod in pods)
        if not pods:
            return
        self.kubectl("delete", "pods", "--all-namespaces", "--all", "--grace-period=0", "--force", "--wait=false")
        running = list(self.nodes.values())
        # What still runs is killed next.
        poll_until(lambda: not any(self._sandboxes(node) for node in running), timeout=60, interval=0.5)

    def _sandboxes(self, node: NodeSpec) -> list[str]:
        """The node's containerd tasks (pod sandboxes and containers) still running."""
        rows = [line.split() for line in self._ctr("tasks", "ls", node=node).splitlines()[1:]]
        return [row[0] for row in rows if len(row) >= 3 and row[2] == "RUNNING"]

    def _kill_tasks(self, node: NodeSpec) -> None:
        ctr = ["ctr", "--address", str(node.containerd_socket), "-n", "k8s.io", "tasks"]
        for task in self._sandboxes(node):
            subprocess.run([*ctr, "kill", "-s", "SIGKILL", task], capture_output=True, check=False)
        # One still running is deleted by force.
        poll_until(lambda: not self._sandboxes(node), timeout=10, interval=0.2)
        for task in self._sandboxes(node):
            subprocess.run([*ctr, "delete", "-f", task], capture_output=True, check=False)

    def _terminate(self, name: str) -> None:
        proc = self.processes.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    @staticmethod
    def _unmount_below(folder: Path) -> None:
        prefix = str(folder.resolve())
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)

    @staticmethod
    def _remove_cgroups(node: NodeSpec) -> None:
        for hierarchy in CGROUP_FS.iterdir():
            top = hierarchy / node.cgroup_root.lstrip("/")
            if not top.is_dir():
                continue
            for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    def _remove_pod_logs(self) -> None:
        for uid in self.pod_uids:
            for folder in Path("/var/log/pods").glob(f"*_{uid}"):
                shutil.rmtree(folder, ignore_errors=True)
        containers = Path("/var/log/containers")
        if containers.is_dir():
            for link in containers.iterdir():
                if link.is_symlink() and not link.exists():
                    link.unlink()

    def leftovers(self) -> list[str]:
        """What of the cluster is still on the machine (empty after ``stop()``)."""
        found = [f"process {name}" for name, proc in self.processes.items() if proc.poll() is None]
        if subprocess.run(["ip", "link", "show", self.bridge], capture_output=True, check=False).returncode == 0:
            found.append(f"bridge {self.bridge}")
        if subprocess.run(["iptables", "-C", "FORWARD", *self._forward_rule], capture_output=True).returncode == 0:
            found.append(f"iptables FORWARD rule for {self.bridge}")
        if self.workdir.exists():
            found.append(f"folder {self.workdir}")
        found += [f"netns {name}" for name in _netns() - self.netns_before if name.startswith("cni-")]
        found += [f"pod log {p}" for uid in self.pod_uids for p in Path("/var/log/pods").glob(f"*_{uid}")]
        for name in self.made:
            found += [item for item in self.node_leftovers(name) if item not in found]
        return found

    def node_leftovers(self, name: str) -> list[str]:
        """What of one node is still on the machine (empty once ``remove_node`` or ``stop`` removed it)."""
        node = self.made[name]
        parts = (node.process("kubelet"), node.process("containerd"))
        found = [f"process {part}" for part in parts if (proc := self.processes.get(part)) and proc.poll() is None]
        top = node.cgroup_root.lstrip("/")
        found += [f"cgroup {h.name}/{top}" for h in CGROUP_FS.iterdir() if (h / top).exists()]
        if node.netns is None:
            return found
        if node.netns in _netns():
            found.append(f"netns {node.netns}")
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
        found += [f"veth {word}" for word in links.split() if word.startswith(self._veth(node))]
        routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True, check=False).stdout
        found += [f"route {line}" for line in routes.splitlines() if line.startswith(f"{node.pod_subnet} ")]
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        found += [f"mount {m}" for m in mounts if m.startswith(str(node.folder.resolve()))]
        if node.folder.exists():
            found.append(f"folder {node.folder}")
        return found
