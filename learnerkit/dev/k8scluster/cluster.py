"""The cluster: its control plane and first node started in order, nodes added, lost, restored and removed,
and everything it made removed and checked gone (``stop``, ``leftovers``)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learnerkit.dev.etcd import EtcdServer, etcd_binary
from learnerkit.dev.k8scluster.api import AdminApi, write_kubeconfig
from learnerkit.dev.k8scluster.binaries import Binaries
from learnerkit.dev.k8scluster.cgroups import cgroup_leftovers, make_cgroup_root, remove_cgroups
from learnerkit.dev.k8scluster.containerd import ctr, import_saved, kill_tasks, sandboxes
from learnerkit.dev.k8scluster.controlplane import (
    NODE_NAME,
    NODE_SLOTS,
    apiserver_argv,
    controllers_argv,
    make_keys,
    scheduler_argv,
    token_users,
)
from learnerkit.dev.k8scluster.forwarder import Forwarder
from learnerkit.dev.k8scluster.host import NOT_YET, free_subnet, mounts_below, run, terminate, unmount_below
from learnerkit.dev.k8scluster.mountns import make_mount_namespace, remove_mount_namespace
from learnerkit.dev.k8scluster.nodenet import connect, disconnect, network_leftovers
from learnerkit.dev.k8scluster.poddns import PodDns
from learnerkit.dev.k8scluster.volumes import make_shared_volumes
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

START_TIMEOUT_S = 120.0
POD_PIDS_LIMIT = 4096
"""The kubelet caps each pod's processes and threads: Kubernetes has no per-container pids limit (docs/security.md)."""


@dataclass
class LocalCluster:
    """Start with ``start()``, always ``stop()``; ``kubeconfig`` is the admin's (token in system:masters)."""

    binaries: Binaries
    workdir: Path
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    forwarders: list[Forwarder] = field(default_factory=list)
    etcd: EtcdServer | None = None
    dns: PodDns | None = None
    started_s: float = 0.0
    _api_forward: int | None = None

    def __post_init__(self) -> None:
        self.subnet = free_subnet()
        self.gateway = str(self.subnet.network_address + 1)
        self.bridge = f"lkk8s{self.suffix}"
        self.api_port, self.scheduler_port, kubelet_port, self.controllers_port = free_ports(4)
        nodes = [f"node-{n}" for n in range(2, NODE_SLOTS + 1)]
        self.tokens = {name: secrets.token_hex(16) for name in ("admin", "node", "scheduler", "controllers", *nodes)}
        self.api = AdminApi(self.server, self.tokens["admin"])
        cgroup_root = f"/lk-k8s-{self.suffix}"
        first = NodeSpec(NODE_NAME, 1, self.workdir, self.gateway, self.subnet, cgroup_root, kubelet_port, self.subnet)
        self.nodes: dict[str, NodeSpec] = {NODE_NAME: first}
        """Every node the cluster runs, the first one first (``add_node`` adds the others)."""
        self.made: dict[str, NodeSpec] = dict(self.nodes)
        """Every node the cluster ever ran, removed ones too: what ``leftovers`` checks."""
        self.images: list[str] = []
        """What ``import_images`` imported: a node added later gets them too."""
        self.kubeconfig = self.workdir / "admin.kubeconfig"

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
        self._spawn("kube-scheduler", scheduler_argv(self.binaries, self.workdir, self.scheduler_port))
        # the node's not-ready taint, which the controller manager's node lifecycle controller would lift, is lifted
        # by _node_up: it runs the volume binder alone
        self._spawn("kube-controller-manager", controllers_argv(self.binaries, self.workdir, self.controllers_port))
        make_shared_volumes(self.api, self.workdir / "shared", self.suffix)
        self.dns = PodDns(self.gateway, self.get)
        self._node_up(self.first)
        self.started_s = time.monotonic() - began

    def _node_up(self, node: NodeSpec) -> None:
        """The node's mount namespace, containerd (with the pause image), cgroup root and kubelet, until the node is
        Ready."""
        make_mount_namespace(node)
        self._containerd(node)
        self.import_archive(self.binaries.pause_archive, node)
        make_cgroup_root(node)
        self._kubelet(node)
        self._wait(lambda: self.node_ready(node.name), f"node {node.name} to be Ready", node.process("kubelet"))
        # The node lifecycle controller (kube-controller-manager, not run here) would lift this taint.
        self.kubectl("taint", "nodes", node.name, "node.kubernetes.io/not-ready-")

    def _bridge_up(self) -> None:
        run("ip", "link", "add", "name", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        # Pod-to-pod traffic crosses the host's FORWARD chain (br_netfilter), whose policy Docker sets to DROP.
        run("iptables", "-I", "FORWARD", "1", *self._forward_rule)

    @property
    def _forward_rule(self) -> tuple[str, ...]:
        return ("-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")

    def _keys(self) -> None:
        make_keys(self.workdir)
        users = token_users()
        lines = [f'{self.tokens[who]},{user},{who},"{group}"' for who, (user, group) in users.items()]
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        for who in users:
            self._write_kubeconfig(self.workdir / f"{who}.kubeconfig", self.tokens[who])

    def _write_kubeconfig(self, path: Path, token: str, server: str | None = None) -> None:
        """For the API server's own address unless ``server`` is given."""
        write_kubeconfig(path, token, server or self.server, self.workdir / "apiserver-certs" / "apiserver.crt")

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
        return self.api.get(path)

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, object] | None = None,
        content_type: str = "application/merge-patch+json",
    ) -> dict[str, object]:
        """Call the API as the admin; a body goes as a JSON merge patch unless ``content_type`` says otherwise."""
        return self.api.request(method, path, body, content_type)

    def _apiserver(self) -> None:
        assert self.etcd is not None
        self._spawn(
            "kube-apiserver",
            apiserver_argv(self.binaries, self.workdir, self.etcd.endpoint, self.api_port, self.gateway, self.subnet),
        )
        self._wait(lambda: self.get("/readyz").get("text") == "ok", "kube-apiserver /readyz", "kube-apiserver")
        for who, token in self.tokens.items():
            self._write_kubeconfig(self.workdir / f"{who}.kubeconfig", token)

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
        return ctr(node or self.first, *args)

    def import_archive(self, archive: Path, node: NodeSpec | None = None) -> None:
        self._ctr("images", "import", "--no-unpack", str(archive), node=node)

    def import_images(self, *refs: str) -> None:
        """``docker save`` of each image, imported into every node's containerd (no registry involved); a node
        added later gets them too."""
        for node in self.nodes.values():
            import_saved(node, refs)
        self.images += [ref for ref in refs if ref not in self.images]

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
        forwarder = Forwarder(self.gateway, target_port)
        self.forwarders.append(forwarder)
        return forwarder.port

    def patch_node_status(self, patch: dict[str, object], name: str = NODE_NAME) -> None:
        """Merge ``patch`` into the node's status (kubectl 1.20 has no ``--subresource``): e.g. fake GPUs."""
        self.request("PATCH", f"/api/v1/nodes/{name}/status", patch)

    def kubectl(self, *args: str) -> str:
        return run(self.binaries.tool("kubectl"), f"--kubeconfig={self.kubeconfig}", *args)

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
        pods = free_subnet()
        node = NodeSpec(f"lk-node-{index}", index, folder, address, pods, cgroup_root, KUBELET_PORT, self.subnet)
        self.nodes[node.name] = self.made[node.name] = node
        self._network(node)
        self._node_up(node)
        import_saved(node, self.images)
        return node.name

    def _network(self, node: NodeSpec) -> None:
        connect(node, self._veth(node), self.bridge, self.subnet)

    def _veth(self, node: NodeSpec) -> str:
        """The host's end of the node's veth (in the cluster bridge)."""
        return f"lkv{self.suffix}{node.index}"

    def remove_node(self, name: str) -> None:
        """A node ``add_node`` made, gone with everything of it: its pods, processes, mounts, cgroups, namespace,
        route and Node object."""
        node = self.nodes.pop(name)
        with contextlib.suppress(*NOT_YET):
            self._force_delete_pods_on(name)
            if node.process("kubelet") in self.processes:  # it tears its pods' networks down
                poll_until(lambda: not sandboxes(node), timeout=60, interval=0.5)
        self._stop_node(node)
        with contextlib.suppress(*NOT_YET):
            self.kubectl("delete", "node", name, "--ignore-not-found")

    def _stop_node(self, node: NodeSpec) -> None:
        self._terminate(node.process("kubelet"))
        with contextlib.suppress(*NOT_YET):
            kill_tasks(node)
        self._terminate(node.process("containerd"))
        remove_cgroups(node)
        remove_mount_namespace(node)
        if node.netns is not None:
            disconnect(node, self._veth(node))

    def lose_node(self, name: str = NODE_NAME) -> None:
        """The node as a machine that went down: its kubelet killed and its pods' processes with it, its Ready
        condition ``Unknown`` as the node lifecycle controller (not run here) sets it once the kubelet stops
        posting. ``restore_node`` brings it back."""
        self._stop_kubelet(name)
        kill_tasks(self.nodes[name])
        self._unknown(name)

    def partition_node(self, name: str) -> None:
        """The node cut off from the control plane: its kubelet killed while its pods' containers run on (and
        still reach what their network reaches), its Ready condition ``Unknown`` as for a lost node.
        ``restore_node`` brings it back; its kubelet then stops the containers of pods deleted meanwhile."""
        self._stop_kubelet(name)
        self._unknown(name)

    def _stop_kubelet(self, name: str) -> None:
        node = self.nodes[name]
        proc = self.processes.pop(node.process("kubelet"))
        proc.kill()
        proc.wait(timeout=10)

    def _unknown(self, name: str) -> None:
        """The node's ``Ready`` condition set as the node lifecycle controller sets it once the kubelet is silent."""
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
            kill_tasks(self.first)
        self._terminate("containerd")
        if self.etcd is not None:
            self.etcd.stop()
        for forwarder in self.forwarders:
            forwarder.close()
        if self.dns is not None:
            self.dns.close()
        remove_mount_namespace(self.first)
        unmount_below(self.workdir)
        remove_cgroups(self.first)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        subprocess.run(["iptables", "-D", "FORWARD", *self._forward_rule], capture_output=True, check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _delete_pods(self) -> None:
        pods = self.get("/api/v1/pods").get("items", [])
        assert isinstance(pods, list)
        if not pods:
            return
        self.kubectl("delete", "pods", "--all-namespaces", "--all", "--grace-period=0", "--force", "--wait=false")
        running = list(self.nodes.values())
        # What still runs is killed next.
        poll_until(lambda: not any(sandboxes(node) for node in running), timeout=60, interval=0.5)

    def _terminate(self, name: str) -> None:
        terminate(self.processes.pop(name, None))

    def leftovers(self) -> list[str]:
        """What of the cluster is still on the machine (empty after ``stop()``)."""
        found = [f"process {name}" for name, proc in self.processes.items() if proc.poll() is None]
        if subprocess.run(["ip", "link", "show", self.bridge], capture_output=True, check=False).returncode == 0:
            found.append(f"bridge {self.bridge}")
        if subprocess.run(["iptables", "-C", "FORWARD", *self._forward_rule], capture_output=True).returncode == 0:
            found.append(f"iptables FORWARD rule for {self.bridge}")
        if self.workdir.exists():
            found.append(f"folder {self.workdir}")
        found += [f"mount {m}" for m in mounts_below(self.workdir)]
        for name in self.made:
            found += [item for item in self.node_leftovers(name) if item not in found]
        return found

    def pod_network_namespaces(self) -> list[Path]:
        """The first node's pods' network namespaces, mounted under its containerd's state folder in the node's
        mount namespace (not in the host's ``/var/run/netns``, where a cluster beside this one, another test
        worker's, would take them for its own), as paths this process can open: through containerd's root."""
        containerd = self.processes["containerd"].pid
        seen = mounts_below(self.workdir, Path(f"/proc/{containerd}/mountinfo"))
        return [Path(f"/proc/{containerd}/root{point}") for point in seen if "/netns/cni-" in point]

    def node_leftovers(self, name: str) -> list[str]:
        """What of one node is still on the machine (empty once ``remove_node`` or ``stop`` removed it)."""
        node = self.made[name]
        parts = (node.process("kubelet"), node.process("containerd"))
        found = [f"process {part}" for part in parts if (proc := self.processes.get(part)) and proc.poll() is None]
        found += cgroup_leftovers(node)
        if node.netns is None:
            return found
        found += network_leftovers(node, self._veth(node))
        found += [f"mount {m}" for m in mounts_below(node.folder)]
        if node.folder.exists():
            found.append(f"folder {node.folder}")
        return found
