"""The learner's CPU, memory and GPU use, for the sidecar's metrics.

The sidecar shares the learner's PID namespace (Kubernetes ``shareProcessNamespace``, Docker ``--pid
container:<learner>``), so ``/proc`` lists the learner's processes beside its own. The learner is every process
that is not the sidecar's own: the sidecar, its ancestors up to its container's init, and its descendants.
(So the sidecar must not be the namespace's PID 1: everything would be its descendant.) Processes end while
they are read; such a process is skipped.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    ppid: int
    cpu_seconds: float
    rss_bytes: int


@dataclass(frozen=True)
class ResourceSample:
    cpu_seconds: float
    """User + system CPU of the live processes (that of processes already gone is not in it)."""
    rss_bytes: int
    processes: int


def read_process(pid: int, proc: Path = PROC) -> ProcessSample | None:
    """``/proc/<pid>/stat`` and ``statm``; None when the process is gone or unreadable."""
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
        statm = (proc / str(pid) / "statm").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces and ')': split after the last one.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        ppid, utime, stime = int(fields[1]), int(fields[11]), int(fields[12])
        resident_pages = int(statm.split()[1])
    except (IndexError, ValueError):
        return None
    return ProcessSample(pid, ppid, (utime + stime) / CLOCK_TICKS, resident_pages * PAGE_SIZE)


def _all_processes(proc: Path) -> Iterator[ProcessSample]:
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            sample = read_process(int(entry.name), proc)
            if sample is not None:
                yield sample


def own_tree(own_pid: int, parents: Mapping[int, int]) -> set[int]:
    """The sidecar's processes: ``own_pid``, its ancestors below PID 1 (its container's init, a wrapper) and
    its descendants (anything it started). ``parents`` maps each PID to its parent's (0: outside the namespace).
    """
    tree = {own_pid}
    pid = parents.get(own_pid, 0)
    while pid not in (0, 1) and pid not in tree:
        tree.add(pid)
        pid = parents.get(pid, 0)
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    todo = list(children.get(own_pid, []))
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def learner_processes(own_pid: int, proc: Path = PROC) -> list[ProcessSample]:
    samples = list(_all_processes(proc))
    mine = own_tree(own_pid, {sample.pid: sample.ppid for sample in samples})
    return [sample for sample in samples if sample.pid not in mine]


def learner_alive(own_pid: int, proc: Path = PROC) -> bool:
    """Whether any learner process still runs: one outside the sidecar's own tree other than the namespace's init
    (Kubernetes' pause process, which outlives the learner's container)."""
    return any(sample.pid != 1 for sample in learner_processes(own_pid, proc))


def sample_learner(own_pid: int, proc: Path = PROC) -> ResourceSample:
    """CPU and memory of every process outside the sidecar's own tree."""
    samples = learner_processes(own_pid, proc)
    return ResourceSample(
        cpu_seconds=sum(sample.cpu_seconds for sample in samples),
        rss_bytes=sum(sample.rss_bytes for sample in samples),
        processes=len(samples),
    )


@functools.cache
def _nvml() -> Any:
    """``pynvml`` (PyPI ``nvidia-ml-py``, the ``gpu`` extra), initialised once per process; None without it."""
    try:
        import pynvml  # optional: only GPU images install it
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver, no libnvidia-ml
        return None
    return pynvml


def gpu_utilisation() -> list[float] | None:
    """Utilisation (0 to 1) of each GPU NVML sees; None without pynvml or a working driver."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        count = nvml.nvmlDeviceGetCount()
        return [nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(i)).gpu / 100 for i in range(count)]
    except nvml.NVMLError:
        return None
