"""The cgroup folders of a running container, for mounting read-only into its sidecar.

The sidecar reads the learner's CPU and memory there, and sees it gone when the folders vanish. Only a
local engine's containers have their cgroups on this host; elsewhere there is nothing to mount.
"""

from __future__ import annotations

import socket
import struct
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


def shares_our_pids(engine_socket: str | None) -> bool:
    """Whether the engine listening on the Unix socket ``engine_socket`` numbers processes as this process does.

    Then a learner whose process this host does not show has ended, whatever the engine still says (it records an
    end a moment later, seconds on a busy machine). The kernel names a socket's peer by its PID in the reader's
    namespace, 0 where it cannot see it (a scheduler in a container given the host's socket); an engine in a
    namespace of its own (Docker in Docker) is seen but numbers its containers' processes otherwise.
    """
    if engine_socket is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(engine_socket)
            credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", credentials)[0]
        ours = (PROC_ROOT / "self" / "ns" / "pid").stat().st_ino
        return pid > 0 and (PROC_ROOT / str(pid) / "ns" / "pid").stat().st_ino == ours
    except OSError:
        return False
