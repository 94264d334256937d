"""The learner container's CPU and memory, read from its cgroup, mounted read-only into the sidecar.

On the local Docker engine the two containers share no PID namespace (a sidecar restart would otherwise
take the learner down with it), so the sidecar reads the learner's cgroup instead: the deploying side
bind-mounts the learner's cgroup folders under one directory, as ``unified/`` (cgroup v2) or ``memory/``,
``cpuacct/`` and ``pids/`` (cgroup v1). When the cgroup holds no process (v2: ``cgroup.events``; v1:
``pids.current``, which counts every PID namespace's processes, unlike ``cgroup.procs``) or its folder vanished,
the learner is gone. A folder the runtime removes after it was mounted stays readable through the mount.
The memory controller counts the OOM killer's kills, so the sidecar can tell an out-of-memory death from
another SIGKILL; the pids controller counts the forks its limit refused, so a learner that failed at its pids
limit is told so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CgroupSample:
    cpu_seconds: float
    memory_bytes: int
    processes: int


class LearnerCgroup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._forks_refused_seen: int | None = None

    @property
    def version(self) -> int:
        return 2 if (self.root / "unified").is_dir() else 1

    def sample(self) -> CgroupSample | None:
        """Cumulative CPU time and current memory of the learner; None when its cgroup is gone."""
        try:
            processes = self._processes()
            if self.version == 2:
                usage_usec = _stat_field(self.root / "unified" / "cpu.stat", "usage_usec")
                memory = int((self.root / "unified" / "memory.current").read_text())
                return CgroupSample(usage_usec / 1e6, memory, processes)
            usage_ns = int((self.root / "cpuacct" / "cpuacct.usage").read_text())
            memory = int((self.root / "memory" / "memory.usage_in_bytes").read_text())
            return CgroupSample(usage_ns / 1e9, memory, processes)
        except (OSError, ValueError):
            return None

    def _processes(self) -> int:
        folder = "unified" if self.version == 2 else "pids"
        try:
            return int((self.root / folder / "pids.current").read_text())
        except (OSError, ValueError):
            return 0

    def describe(self) -> str:
        """Which of the learner's cgroup folders are mounted here, e.g. ``cgroup v1 at /learner-cgroup: memory,
        pids``; none where the learner ended before the sidecar started."""
        found = sorted(child.name for child in self.root.iterdir()) if self.root.is_dir() else []
        mounted = ", ".join(found) if found else "none mounted (the learner ended before the sidecar started)"
        return f"cgroup v{self.version} at {self.root}: {mounted}"

    def populated(self) -> bool:
        """Whether any learner process is alive; False once the learner container has stopped. Each look also
        notes the forks refused so far (:meth:`forks_refused`), which the runtime removes with the folder."""
        self.forks_refused()
        try:
            if self.version == 2:
                return "populated 1" in (self.root / "unified" / "cgroup.events").read_text()
            # A folder removed after it was mounted stays readable through the mount, files and all, with no
            # process left in it: its process count (any PID namespace's) says whether the learner still runs.
            pids = self.root / "pids" / "pids.current"
            if pids.is_file():
                return int(pids.read_text()) > 0
            return (self.root / "memory" / "memory.usage_in_bytes").is_file()
        except (OSError, ValueError):
            return False

    def oom_kills(self) -> int | None:
        """How many of the learner's processes the kernel's OOM killer killed; None where the cgroup does not say
        (v2: ``memory.events``; v1: ``memory.oom_control``, kernels from 4.13)."""
        try:
            if self.version == 2:
                return _stat_field(self.root / "unified" / "memory.events", "oom_kill")
            return _stat_field(self.root / "memory" / "memory.oom_control", "oom_kill")
        except (OSError, ValueError):
            return None

    def forks_refused(self) -> int | None:
        """How many times the learner's pids limit refused a new process or thread, as last seen (the count is
        gone with the learner's cgroup once it stops); None where the cgroup never said (no pids controller)."""
        folder = "unified" if self.version == 2 else "pids"
        try:
            count = _stat_field(self.root / folder / "pids.events", "max")
        except (OSError, ValueError):
            return self._forks_refused_seen
        self._forks_refused_seen = max(count, self._forks_refused_seen or 0)
        return self._forks_refused_seen


def _stat_field(path: Path, name: str) -> int:
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    raise ValueError(f"{path}: no {name}")
