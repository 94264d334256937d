"""What the cluster asks of the host: commands that must succeed, free subnets, network namespaces, mounts and
the processes it spawned."""

from __future__ import annotations

import ipaddress
import secrets
import signal
import subprocess
from pathlib import Path

NOT_YET = (OSError, RuntimeError, ValueError, LookupError)
"""What a part not up yet (or gone already) answers: a refused connection, a failed tool, a short reply."""
NETNS = Path("/var/run/netns")


def run(*argv: str) -> str:
    """Its standard output; a RuntimeError with its error output when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def netns() -> set[str]:
    return {p.name for p in NETNS.iterdir()} if NETNS.is_dir() else set()


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.222.0.0/16 that no interface or route of this machine uses yet."""
    used = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.222.{secrets.randbelow(256)}.0/24")
        if str(net) not in used and f"{net.network_address + 1}" not in used:
            return net
    raise RuntimeError("no free /24 left in 10.222.0.0/16")


def mounts_below(folder: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[str]:
    """The mount points at or below ``folder`` in the mount namespace ``mountinfo`` describes (this process's
    unless told)."""
    top = str(folder.resolve())
    points = [line.split()[4] for line in mountinfo.read_text().splitlines()]
    return [point for point in points if point == top or point.startswith(f"{top}/")]


def unmount_below(folder: Path) -> None:
    for point in sorted(mounts_below(folder), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 20 s; nothing for a process already gone."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
