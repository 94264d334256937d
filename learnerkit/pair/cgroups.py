"""The cgroup folders of a running container, for mounting read-only into its sidecar.

The sidecar reads the learner's CPU and memory there, and sees it gone when the folders vanish. Only a
local engine's containers have their cgroups on this host; elsewhere there is nothing to mount.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SIDECAR_MOUNT = "/learner-cgroup"


def cgroup_mounts(pid: int, root: Path = CGROUP_ROOT) -> dict[str, str]:
    """Host folder -> folder in the sidecar, for the process ``pid``'s cgroup (v2, or v1 memory, cpuacct, pids)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
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
    return {host: inside for host, inside in mounts.items() if Path(host).is_dir()}
