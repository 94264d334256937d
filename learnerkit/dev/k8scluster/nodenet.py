"""An added node's network and mount namespaces: a veth into the cluster bridge with the node's address, the
host's route to its pods, and its own pod log folders; and their removal."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

from learnerkit.dev.k8scluster.host import netns, run, unmount_below
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
    _mount_namespace(node)


def _mount_namespace(node: NodeSpec) -> None:
    """The node's mount namespace, kept by a file in a private mount (a namespace file may not sit in a shared
    one), with the node's own pod log folders bound over the host's."""
    keep = node.mount_namespace.parent
    keep.mkdir(parents=True)
    run("mount", "--bind", str(keep), str(keep))
    run("mount", "--make-private", str(keep))
    node.mount_namespace.touch()
    run("unshare", f"--mount={node.mount_namespace}", "--propagation", "slave", "true")
    for target in (Path("/var/log/pods"), Path("/var/log/containers")):
        own = node.folder / "logs" / target.name
        own.mkdir(parents=True)
        target.mkdir(parents=True, exist_ok=True)
        run("nsenter", f"--mount={node.mount_namespace}", "--", "mount", "--bind", str(own), str(target))


def disconnect(node: NodeSpec, veth: str) -> None:
    """Its mounts (volumes, snapshots, pod namespaces, log folders) live in its mount namespace: they go with it
    once the file that keeps it is unmounted and its processes are gone."""
    assert node.netns is not None
    unmount_below(node.mount_namespace.parent)
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
