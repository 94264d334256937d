"""CPU seconds and peak memory of processes and containers on this host, read from /proc and cgroup v1/v2.

What the scheduler benchmark charges to the platform: the scheduler's process, the engine (dockerd,
containerd, each container's shim with the runc calls it reaps) and each sidecar container.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
MB = 1 << 20


def cpu_split(pid: int) -> tuple[float, float] | None:
    """User + system CPU of ``pid`` itself, and of the children it reaped; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is the state (field 3): utime, stime, cutime, cstime are fields 14..17.
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


def cpu_seconds(pid: int, *, children: bool = False) -> float | None:
    """User + system CPU of ``pid`` (with its reaped children's); None once it is gone."""
    split = cpu_split(pid)
    if split is None:
        return None
    return split[0] + split[1] if children else split[0]


def status_kb(pid: int, name: str) -> int | None:
    """A ``VmHWM``/``VmRSS`` line of /proc/PID/status in kB; None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def pids_named(*names: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if comm in names:
                found.append(int(entry.name))
    return found


def shim_of(container_id: str) -> int | None:
    """The containerd shim serving a container (``containerd-shim-runc-v2 ... -id <container id>``)."""
    for pid in pids_named("containerd-shim", "containerd-shim-runc-v2"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if container_id.encode() in argv:
            return pid
    return None


def cgroup_dir(controller: str, container_id: str) -> Path | None:
    """The container's cgroup folder for a v1 controller (cgroupfs or systemd driver), or its v2 folder."""
    for candidate in (
        Path(f"/sys/fs/cgroup/{controller}/docker/{container_id}"),
        Path(f"/sys/fs/cgroup/{controller}/system.slice/docker-{container_id}.scope"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope"),
        Path(f"/sys/fs/cgroup/docker/{container_id}"),
    ):
        if candidate.is_dir():
            return candidate
    return None


@dataclass
class ContainerCost:
    """The last readings of one container before it went away: what it and its shim spent."""

    cpu_s: float = 0.0
    """CPU of every process in the container (its cgroup's usage)."""
    peak_rss_mb: float = 0.0
    """The sum of its processes' peak resident sets (VmHWM), page cache excluded."""
    shim_own_s: float = 0.0
    shim_children_s: float = 0.0
    """What the shim reaped: its runc calls and, once it ended, the container's own first process, whose
    time holds the container's CPU (the shim is the container's subreaper)."""
    shim_children_alive_s: float = 0.0
    """What the shim had reaped while the container ran: runc calls only."""
    _peaks: dict[int, int] = field(default_factory=dict)

    @property
    def shim_cpu_s(self) -> float:
        """The engine's share on the host: the container's shim and the runc calls it ran, with the container's
        own CPU taken out of what the shim reaped (counted there too, the engine's share read 5x too high)."""
        return self.shim_own_s + max(self.shim_children_alive_s, self.shim_children_s - self.cpu_s)

    def read(self, cpuacct: Path | None, shim: int | None) -> bool:
        """Take a reading; False once the container's cgroup is gone."""
        alive = False
        if cpuacct is not None:
            usage = read_cgroup_cpu(cpuacct)
            if usage is not None:
                alive = True
                self.cpu_s = max(self.cpu_s, usage)
                for pid in _procs(cpuacct):
                    peak = status_kb(pid, "VmHWM")
                    if peak is not None:
                        self._peaks[pid] = max(self._peaks.get(pid, 0), peak)
                self.peak_rss_mb = sum(self._peaks.values()) / 1024
        if shim is not None:
            split = cpu_split(shim)
            if split is not None:
                self.shim_own_s = max(self.shim_own_s, split[0])
                self.shim_children_s = max(self.shim_children_s, split[1])
                if alive:
                    self.shim_children_alive_s = max(self.shim_children_alive_s, split[1])
        return alive


def read_cgroup_cpu(folder: Path) -> float | None:
    """CPU seconds a cgroup has used (v1 ``cpuacct.usage`` or v2 ``cpu.stat``); None once it is gone."""
    try:
        if (folder / "cpuacct.usage").exists():
            return int((folder / "cpuacct.usage").read_text()) / 1e9
        for line in (folder / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    except (OSError, ValueError):
        return None
    return None


def _procs(folder: Path) -> list[int]:
    try:
        return [int(line) for line in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


class ContainerSampler:
    """Samples containers from their start until their cgroup is gone, on one thread."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.costs: dict[str, ContainerCost] = {}
        self._watched: dict[str, tuple[Path | None, int | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def watch(self, container_id: str) -> None:
        cost = ContainerCost()
        where = (cgroup_dir("cpuacct", container_id), shim_of(container_id))
        cost.read(*where)
        with self._lock:
            self.costs[container_id] = cost
            self._watched[container_id] = where

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                watched = dict(self._watched)
            for container_id, where in watched.items():
                if not self.costs[container_id].read(*where):
                    with self._lock:
                        self._watched.pop(container_id, None)

    def settle(self, timeout_s: float = 30.0) -> None:
        """Wait until every watched container is gone."""
        deadline = time.monotonic() + timeout_s
        while self._watched and time.monotonic() < deadline:
            time.sleep(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


class EngineMeter:
    """CPU of dockerd and containerd (the engine's daemons) since the meter started, less their idle rate."""

    def __init__(self, idle_s: float) -> None:
        self.pids = pids_named("dockerd", "containerd")
        start = self._total()
        time.sleep(idle_s)
        self.idle_rate = (self._total() - start) / idle_s
        """CPU-s per second the daemons spent with no job of ours: other users of the engine, its own timers."""
        self._start, self._at = self._total(), time.monotonic()

    def _total(self) -> float:
        return sum(cpu_seconds(pid) or 0.0 for pid in self.pids)

    def spent(self) -> tuple[float, float]:
        """CPU-s since the meter started: all of it, and what its idle rate accounts for."""
        return self._total() - self._start, self.idle_rate * (time.monotonic() - self._at)


class ProcessMeter:
    """One process's CPU and peak RSS since the meter started."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu = cpu_seconds(pid) or 0.0
        self.rss_mb_at_start = (status_kb(pid, "VmRSS") or 0) / 1024

    def cpu_s(self) -> float:
        return (cpu_seconds(self.pid) or 0.0) - self._cpu

    def peak_rss_mb(self) -> float:
        return (status_kb(self.pid, "VmHWM") or 0) / 1024
