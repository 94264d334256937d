"""A node's mount namespace, shared by its kubelet and containerd, with pod log folders of the node's own.

Kubelet 1.20 writes pod logs under the fixed ``/var/log/pods`` (and links them in ``/var/log/containers``), and its
garbage collection deletes every pod log folder of a pod it does not know. Every cluster's every node (one cluster per
test worker runs side by side) therefore gets a mount namespace of its own, a slave of the host's (it sees the host's
mounts, the host not its), in which those two paths are folders under the node's own folder: no kubelet deletes
another's logs, and nothing of a node's logs is left outside its folder.
"""

from __future__ import annotations

from pathlib import Path

from learnerkit.dev.k8scluster.host import run, unmount_below
from learnerkit.dev.k8snode import NodeSpec

LOG_FOLDERS = (Path("/var/log/pods"), Path("/var/log/containers"))


def make_mount_namespace(node: NodeSpec) -> None:
    """The node's mount namespace, kept by a file in a private mount (a namespace file may not sit in a shared
    one), with the node's own pod log folders bound over the host's."""
    keep = node.mount_namespace.parent
    keep.mkdir(parents=True)
    run("mount", "--bind", str(keep), str(keep))
    run("mount", "--make-private", str(keep))
    node.mount_namespace.touch()
    run("unshare", f"--mount={node.mount_namespace}", "--propagation", "slave", "true")
    for target in LOG_FOLDERS:
        own = node.folder / "logs" / target.name
        own.mkdir(parents=True)
        target.mkdir(parents=True, exist_ok=True)
        run("nsenter", f"--mount={node.mount_namespace}", "--", "mount", "--bind", str(own), str(target))


def remove_mount_namespace(node: NodeSpec) -> None:
    """Its mounts (volumes, snapshots, pod network namespaces, log folders) go with the namespace once the file
    that keeps it is unmounted and its processes are gone."""
    unmount_below(node.mount_namespace.parent)
