"""Why a job waits or was rejected: structured for tests and callers, with the sentence `job status` shows."""

from __future__ import annotations

from dataclasses import dataclass, field

from learnerkit.scheduler.admission.capacity import GIB, PoolKey, gpu_kind


def _jobs(count: int) -> str:
    return f"{count} higher-priority job" + ("" if count == 1 else "s")


class Reason:
    @property
    def message(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class WaitingForGpus(Reason):
    """Not enough free GPUs of the type, on one node or (for several learners) in all."""

    gpu_type: str
    gpus: int
    """The job's GPUs of this type."""
    learners: int
    most_free: int
    """The most GPUs of the type free on one node ..."""
    node: str | None
    """... and that node."""
    free_total: int

    @property
    def message(self) -> str:
        where = f"{self.most_free} free on {self.node}" if self.node else "none free"
        if self.learners == 1:
            return f"waiting for {self.gpus} {gpu_kind(self.gpu_type)}: {where}"
        return (
            f"waiting for {self.gpus} {gpu_kind(self.gpu_type)} for {self.learners} learners together: "
            f"{where}, {self.free_total} free in all"
        )


@dataclass(frozen=True)
class WaitingForRoom(Reason):
    """Enough GPUs, but no node has the CPUs and memory beside them (or a CPU-only learner has no room)."""

    need: str
    """What the learner that found no node asks for."""
    learners: int
    millicpus: int = field(default=0, compare=False)
    """That learner's CPUs (millicores) and memory, for what would free it (`freeing.what_frees`); ``need`` in
    numbers, so not compared."""
    memory_bytes: int = field(default=0, compare=False)

    @property
    def message(self) -> str:
        if self.learners == 1:
            return f"waiting for {self.need}: no node has them free"
        return f"waiting for room for all {self.learners} learners together: one needs {self.need}"


@dataclass(frozen=True)
class OverQuota(Reason):
    tenant: str
    quota: int
    in_use: int
    """Of the tenant's admitted and running jobs."""
    held: int
    """Of the tenant's jobs ahead in the queue, which this job must not delay."""
    needs: int
    resource: str = "GPU"
    """GPU, CPU (amounts in millicores), memory (bytes) or running-jobs."""

    def _amount(self, value: int) -> str:
        if self.resource == "CPU":
            return f"{value / 1000:g}"
        if self.resource == "memory":
            return f"{value / GIB:.1f} GiB"
        return str(value)

    @property
    def message(self) -> str:
        held = f", {self._amount(self.held)} held for its higher-priority jobs" if self.held else ""
        return (
            f"tenant {self.tenant!r} {self.resource} quota {self._amount(self.quota)} reached "
            f"({self._amount(self.in_use)} in use{held}, job needs {self._amount(self.needs)})"
        )


@dataclass(frozen=True)
class BehindQueue(Reason):
    """A job ahead waits for the same pool; strict head-of-line order within a pool."""

    jobs: int
    pool: PoolKey

    @property
    def message(self) -> str:
        what = gpu_kind(self.pool) if self.pool else "CPU-only room"
        return f"behind {_jobs(self.jobs)} waiting for {what}"


@dataclass(frozen=True)
class BackingOff(Reason):
    timeouts: int
    """How many times the job's learners were not all running in time."""
    retry_in_s: float

    @property
    def message(self) -> str:
        times = "once" if self.timeouts == 1 else f"{self.timeouts} times"
        return f"learners were not all running within the ready timeout {times}; retrying in {self.retry_in_s:.0f} s"


@dataclass(frozen=True)
class Unschedulable(Reason):
    """The job can never be admitted as it is: rejected, not queued."""

    why: str

    @property
    def message(self) -> str:
        return f"unschedulable: {self.why}"
