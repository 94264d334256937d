"""One node's configuration on the local cluster: the first node's pods on the cluster bridge below the other
nodes' addresses; a further node's pods on a bridge of its own, routed to the cluster bridge's /24, and its
kubelet and containerd run in its own namespaces."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from learnerkit.dev.k8snode import KUBELET_PORT, POD_BRIDGE, NodeSpec, cni_config, containerd_config, kubelet_config

CLUSTER = ipaddress.IPv4Network("10.222.7.0/24")
FIRST = NodeSpec("lk-node-1", 1, Path("/w"), "10.222.7.1", CLUSTER, "/lk-k8s-abc", 40000, CLUSTER)
SECOND = NodeSpec(
    "lk-node-2",
    2,
    Path("/w/node-2"),
    "10.222.7.202",
    ipaddress.IPv4Network("10.222.9.0/24"),
    "/lk-k8s-abc-2",
    KUBELET_PORT,
    CLUSTER,
)


def bridge_plugin(node: NodeSpec) -> dict[str, Any]:
    plugins = cni_config(node, "lkk8sabc", "net")["plugins"]
    assert isinstance(plugins, list)
    first: dict[str, Any] = plugins[0]
    return first


def test_the_first_nodes_pods_take_addresses_below_the_other_nodes() -> None:
    plugin = bridge_plugin(FIRST)
    assert plugin["bridge"] == "lkk8sabc"
    assert plugin["ipam"]["ranges"] == [
        [{"subnet": "10.222.7.0/24", "gateway": "10.222.7.1", "rangeEnd": "10.222.7.200"}]
    ]
    assert plugin["ipam"]["routes"] == []
    assert (FIRST.netns, FIRST.process("kubelet")) == (None, "kubelet")
    assert FIRST.nsenter() == ["nsenter", "--mount=/w/ns/mnt", "--"], "its own mount namespace, the host's network"


def test_a_further_nodes_pods_sit_behind_its_own_bridge_routed_to_the_cluster_bridge() -> None:
    plugin = bridge_plugin(SECOND)
    assert plugin["bridge"] == POD_BRIDGE
    assert plugin["ipam"]["ranges"] == [[{"subnet": "10.222.9.0/24", "gateway": "10.222.9.1"}]]
    assert plugin["ipam"]["routes"] == [{"dst": "10.222.7.0/24", "gw": "10.222.9.1"}]
    assert plugin["ipam"]["dataDir"] == "/w/node-2/cni-ipam"


def test_a_further_nodes_processes_run_in_its_namespaces_with_folders_of_its_own() -> None:
    assert SECOND.netns == "lk-k8s-abc-2"
    assert SECOND.nsenter() == ["nsenter", "--mount=/w/node-2/ns/mnt", "--net=/var/run/netns/lk-k8s-abc-2", "--"]
    assert (SECOND.process("kubelet"), SECOND.process("containerd")) == ("kubelet-2", "containerd-2")
    config = containerd_config(SECOND, "pause:3")
    assert 'address = "/w/node-2/containerd/containerd.sock"' in config
    assert 'conf_dir = "/w/node-2/cni"' in config
    kubelet = kubelet_config(SECOND, "10.222.7.1", Path("/w/resolv.conf"), 4096)
    assert (kubelet["address"], kubelet["port"], kubelet["cgroupRoot"], kubelet["clusterDNS"]) == (
        "10.222.7.202",
        KUBELET_PORT,
        "/lk-k8s-abc-2",
        ["10.222.7.1"],
    )
