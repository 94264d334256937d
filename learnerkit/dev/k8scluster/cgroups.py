"""A node's cgroup root: the kubelet's pods live under it in every v1 hierarchy, and it goes with the node."""

from __future__ import annotations

import contextlib
from pathlib import Path

from learnerkit.dev.k8snode import NodeSpec

CGROUP_FS = Path("/sys/fs/cgroup")


def make_cgroup_root(node: NodeSpec) -> None:
    """The kubelet's cgroup root in every v1 hierarchy (it must exist); cpuset needs its CPUs and nodes."""
    for hierarchy in CGROUP_FS.iterdir():
        if hierarchy.is_symlink() or not hierarchy.is_dir():
            continue
        top = hierarchy / node.cgroup_root.lstrip("/")
        top.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists():
                (top / name).write_text((hierarchy / name).read_text())


def remove_cgroups(node: NodeSpec) -> None:
    for hierarchy in CGROUP_FS.iterdir():
        top = hierarchy / node.cgroup_root.lstrip("/")
        if not top.is_dir():
            continue
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def cgroup_leftovers(node: NodeSpec) -> list[str]:
    top = node.cgroup_root.lstrip("/")
    return [f"cgroup {h.name}/{top}" for h in CGROUP_FS.iterdir() if (h / top).exists()]
