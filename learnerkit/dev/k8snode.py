"""One node of the local cluster (``learnerkit/dev/k8scluster/``): its names, addresses and folders, and the
configuration files of its containerd, its CNI network and its kubelet.

The first node lives in the host's network namespace: its address is the cluster bridge's gateway and its pods
sit on that bridge. Every further node gets a network namespace of its own with a veth into the cluster bridge
(its own address there, so its kubelet's ports clash with nothing), a pod subnet of its own behind a bridge
inside that namespace, and its own containerd, kubelet folders and cgroup root: two kubelets on one containerd
would each see the other's pod sandboxes. Every node's kubelet and containerd, the first's too, share a mount
namespace of their own (``learnerkit/dev/k8scluster/mountns.py``) in which the pod log folders are the node's: two
kubelets on one ``/var/log/pods`` delete each other's pods' logs. Its pods' network namespaces are mounted under its
containerd's state folder, in that mount namespace, not in the host's ``/var/run/netns``: clusters run side by side
(one per test worker), and each removes and checks only what is its own.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

CNI_BIN = Path("/usr/lib/cni")
KUBELET_PORT = 10250
"""The port of every further node's kubelet: each has an address of its own."""
NODE_ADDRESS_OFFSET = 200
"""Node ``n`` (n >= 2) has the address ``offset + n`` in the cluster bridge's /24; the first node's pods take
addresses below it."""
POD_BRIDGE = "lkpods0"
"""The bridge inside a further node's namespace that its pods sit on."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int
    """1 for the first node (host network namespace), 2 and up for the others."""
    folder: Path
    """The node's containerd, CNI and kubelet folders live here."""
    address: str
    pod_subnet: ipaddress.IPv4Network
    cgroup_root: str
    kubelet_port: int
    cluster_subnet: ipaddress.IPv4Network
    """The cluster bridge's /24 (the first node's pod subnet): further nodes' pods reach its gateway through it."""

    @property
    def first(self) -> bool:
        return self.index == 1

    @property
    def netns(self) -> str | None:
        """The node's own network namespace, named as its cgroup root (None for the first node: the host's)."""
        return None if self.first else self.cgroup_root.strip("/")

    @property
    def mount_namespace(self) -> Path:
        """The file that keeps the node's mount namespace, in a private mount of its own."""
        return self.folder / "ns" / "mnt"

    @property
    def pod_gateway(self) -> str:
        return str(self.pod_subnet.network_address + 1)

    @property
    def containerd_socket(self) -> Path:
        return self.folder / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's ``--root-dir``: its pods' volumes are under ``pods/<uid>/volumes``."""
        return self.folder / "kubelet" / "root"

    def empty_dir(self, pod_uid: str, volume: str) -> Path:
        """Where the pod's ``emptyDir`` volume ``volume`` (of the default medium) is on the node's disk."""
        return self.kubelet_root / "pods" / pod_uid / "volumes" / "kubernetes.io~empty-dir" / volume

    def process(self, part: str) -> str:
        """The name the cluster keeps the node's ``kubelet`` or ``containerd`` process (and its log) under."""
        return part if self.first else f"{part}-{self.index}"

    def nsenter(self) -> list[str]:
        """The argv prefix that runs a command in the node's namespaces: its mount namespace, and its network
        namespace but for the first node (``ip netns exec`` would give every command a mount namespace of its own,
        hiding the kubelet's mounts from containerd and the cgroups from both)."""
        net = [] if self.netns is None else [f"--net=/var/run/netns/{self.netns}"]
        return ["nsenter", f"--mount={self.mount_namespace}", *net, "--"]


def cni_config(node: NodeSpec, bridge: str, network: str) -> dict[str, object]:
    """The CNI network of the node's pods: on the cluster bridge (first node, its addresses below the other
    nodes'), or on a bridge inside the node's namespace with a route to the cluster bridge's /24."""
    ipam_range: dict[str, str] = {"subnet": str(node.pod_subnet), "gateway": node.pod_gateway}
    routes: list[dict[str, str]] = []
    if node.first:
        ipam_range["rangeEnd"] = str(node.pod_subnet.network_address + NODE_ADDRESS_OFFSET)
    else:
        routes.append({"dst": str(node.cluster_subnet), "gw": node.pod_gateway})
    return {
        "cniVersion": "0.4.0",
        "name": network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge if node.first else POD_BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(node.folder / "cni-ipam"),
                    "ranges": [[ipam_range]],
                    "routes": routes,
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(node: NodeSpec, pause_ref: str) -> str:
    root = node.folder / "containerd"
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
[grpc]
  address = "{node.containerd_socket}"
[ttrpc]
  address = "{root / "ttrpc.sock"}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_ref}"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{root / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{node.folder / "cni"}"
"""


def kubelet_config(node: NodeSpec, dns: str, resolv_conf: Path, pods_pids_limit: int) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.address,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "failSwapOn": False,
        "podPidsLimit": pods_pids_limit,
        "makeIPTablesUtilChains": False,
        "hairpinMode": "none",
        "resolvConf": str(resolv_conf),
        "clusterDNS": [dns],
        "clusterDomain": "cluster.local",
        # The node shares the host's disk with everything else on the machine: a nearly full host disk must not
        # evict the test cluster's pods (DiskPressure), so disk thresholds are off ("0%" disables one).
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
    }


def write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
