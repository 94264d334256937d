"""A node's containerd as ``ctr`` sees it: images imported, tasks listed and killed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

from learnerkit.dev.k8scluster.host import run
from learnerkit.dev.k8snode import NodeSpec
from learnerkit.dev.polling import poll_until


def ctr(node: NodeSpec, *args: str) -> str:
    return run("ctr", "--address", str(node.containerd_socket), "-n", "k8s.io", *args)


def import_saved(node: NodeSpec, refs: Iterable[str]) -> None:
    """``docker save`` of each image into the node's containerd (no registry involved)."""
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


def sandboxes(node: NodeSpec) -> list[str]:
    """The node's containerd tasks (pod sandboxes and containers) still running."""
    rows = [line.split() for line in ctr(node, "tasks", "ls").splitlines()[1:]]
    return [row[0] for row in rows if len(row) >= 3 and row[2] == "RUNNING"]


def kill_tasks(node: NodeSpec) -> None:
    tasks = ["ctr", "--address", str(node.containerd_socket), "-n", "k8s.io", "tasks"]
    for task in sandboxes(node):
        subprocess.run([*tasks, "kill", "-s", "SIGKILL", task], capture_output=True, check=False)
    # One still running is deleted by force.
    poll_until(lambda: not sandboxes(node), timeout=10, interval=0.2)
    for task in sandboxes(node):
        subprocess.run([*tasks, "delete", "-f", task], capture_output=True, check=False)
