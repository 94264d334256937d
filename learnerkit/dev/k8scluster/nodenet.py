"""An added node's network namespace: a veth into the cluster bridge with the node's address and the host's route
to its pods; and their removal."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

from learnerkit.dev.k8scluster.host import netns, run
from learnerkit.dev.k8snode import NodeSpec


def connect(node: NodeSpec, veth: str, bridge: str, subnet: ipaddress.IPv4Network) -> None:
    """The node's namespace, its veth into the cluster bridge with its address, and the host's route to its
    pods (their replies from the gateway's forwarders and DNS go back that way)."""
    assert node.netns is not None
    in_ns = ["ip", "-n", node.netns]
    run("ip", "netns", "add", node.netns)
    run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
    run("ip", "link", "set", veth, "master", bridge, "up")
    run(*in_ns, "addr", "add", f"{node.address}/{subnet.prefixlen}", "dev", "eth0")
    run(*in_ns, "link", "set", "eth0", "up")
    run(*in_ns, "link", "set", "lo", "up")
    run("ip", "netns", "exec", node.netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
    run("ip", "route", "add", str(node.pod_subnet), "via", node.address, "dev", bridge)


def disconnect(node: NodeSpec, veth: str) -> None:
    """Its namespace, veth and route, and its folder (its mount namespace is removed before)."""
    assert node.netns is not None
    subprocess.run(["ip", "route", "delete", str(node.pod_subnet)], capture_output=True, check=False)
    subprocess.run(["ip", "link", "delete", veth], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "delete", node.netns], capture_output=True, check=False)
    shutil.rmtree(node.folder, ignore_errors=True)


def network_leftovers(node: NodeSpec, veth: str) -> list[str]:
    """The namespace, veth and route of an added node still on the machine."""
    assert node.netns is not None
    found = [f"netns {node.netns}"] if node.netns in netns() else []
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    found += [f"veth {word}" for word in links.split() if word.startswith(veth)]
    routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True, check=False).stdout
    found += [f"route {line}" for line in routes.splitlines() if line.startswith(f"{node.pod_subnet} ")]
    return found
