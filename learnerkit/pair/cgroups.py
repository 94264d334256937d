"""The cgroup folders of a running container, for mounting read-only into its sidecar.

The sidecar reads the learner's CPU and memory there, and sees it gone when the folders vanish. Only a
local engine's containers have their cgroups on this host; elsewhere there is nothing to mount.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_ROOT = Path("/proc")
SIDECAR_MOUNT = "/learner-cgroup"


def cgroup_mounts(pid: int, root: Path = CGROUP_ROOT, proc: Path = PROC_ROOT) -> dict[str, str] | None:
    """Host folder -> folder in the sidecar, for the process ``pid``'s cgroup (v2, or v1 memory, cpuacct, pids).

    Empty when this host shows no such process (a remote engine's container). None when the process is ending:
    its cgroup lists a folder that is gone already. The runtime removes a stopped container's folders one
    controller after the other, and a partial set would mislead the sidecar: without ``pids`` it could not tell
    that the learner is gone.
    """
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return {}
    mounts: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (root / "cgroup.controllers").exists():
            mounts[str(root / path.lstrip("/"))] = f"{SIDECAR_MOUNT}/unified"
        for name in ("memory", "cpuacct", "pids"):
            if name in controllers.split(","):
                mounts[str(root / controllers / path.lstrip("/"))] = f"{SIDECAR_MOUNT}/{name}"
    if not all(Path(host).is_dir() for host in mounts):
        return None
    return mounts
