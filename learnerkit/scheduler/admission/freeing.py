"""What a waiting job waits on, in one word, and what would free it, in words: read off the admission's own
reasons (`reasons.py`), so the console's queue says exactly what `job status` says, never a second judgement."""

from __future__ import annotations

from learnerkit.scheduler.admission.capacity import GIB, Cluster, gpu_kind
from learnerkit.scheduler.admission.reasons import (
    BackingOff,
    BehindQueue,
    OverQuota,
    Reason,
    Unschedulable,
    WaitingForGpus,
    WaitingForRoom,
)

QUOTA = "quota"
GANG = "gang"
NODE_FIT = "node fit"
PRIORITY = "priority"
BACKOFF = "backoff"
REJECTED = "rejected"
WAITING = "waiting"
"""A sentence recorded before this scheduler's first pass judged the job (after a restart)."""


def kind_of(reason: Reason | str) -> str:
    """quota, gang (several learners placed together), node fit, priority (behind jobs ahead), backoff, rejected."""
    if isinstance(reason, OverQuota):
        return QUOTA
    if isinstance(reason, WaitingForGpus | WaitingForRoom):
        return GANG if reason.learners > 1 else NODE_FIT
    if isinstance(reason, BehindQueue):
        return PRIORITY
    if isinstance(reason, BackingOff):
        return BACKOFF
    if isinstance(reason, Unschedulable):
        return REJECTED
    return WAITING


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def what_frees(reason: Reason | str, cluster: Cluster) -> str:
    """What must change for the job to go: "2 CPUs more free on a node", "quota: 1 running job of yours must end"."""
    if isinstance(reason, OverQuota):
        short = reason.in_use + reason.held + reason.needs - reason.quota
        if reason.resource == "running-jobs":
            if reason.held and short <= reason.held:
                return f"quota: {_plural(short, 'job')} of yours ahead in the queue must start and end"
            return f"quota: {_plural(short, 'running job')} of yours must end"
        amount = {
            "CPU": lambda v: _plural_float(v / 1000, "CPU"),
            "memory": lambda v: f"{v / GIB:.1f} GiB memory",
            "GPU": lambda v: _plural(v, "GPU"),
        }[reason.resource](short)
        return f"quota: your running jobs must free {amount}"
    if isinstance(reason, WaitingForGpus):
        if reason.learners == 1:
            return f"{reason.gpus - reason.most_free} {gpu_kind(reason.gpu_type)} more free on one node"
        more = reason.gpus - reason.free_total
        if more > 0:
            return f"{more} {gpu_kind(reason.gpu_type)} more free in all, each learner's share on one node"
        return f"each learner's share of the {reason.gpus} {gpu_kind(reason.gpu_type)} free on one open node"
    if isinstance(reason, WaitingForRoom):
        return _room_short(reason, cluster)
    if isinstance(reason, BehindQueue):
        what = gpu_kind(reason.pool) if reason.pool else "CPU-only room"
        return f"the {_plural(reason.jobs, 'job')} ahead waiting for {what} must start first"
    if isinstance(reason, BackingOff):
        return f"its retry in {reason.retry_in_s:.0f} s"
    if isinstance(reason, Unschedulable):
        return "nothing: it is rejected"
    return "the next scheduling pass says"


def _plural_float(value: float, one: str) -> str:
    return f"{value:g} {one}" + ("" if value == 1 else "s")


def _room_short(reason: WaitingForRoom, cluster: Cluster) -> str:
    """The node closest to holding the learner: what it lacks of CPUs and memory."""
    best: tuple[int, int] | None = None
    for name in cluster.nodes:
        if name in cluster.closed:
            continue
        free = cluster.free(name)
        short = (max(reason.millicpus - free.millicpus, 0), max(reason.memory_bytes - free.memory_bytes, 0))
        if best is None or short < best:
            best = short
    if best is None or best == (0, 0):
        return f"a node with {reason.need} free"
    parts = [_plural_float(best[0] / 1000, "CPU")] if best[0] else []
    if best[1]:
        parts.append(f"{best[1] / GIB:.1f} GiB memory")
    learners = "" if reason.learners == 1 else f" (for one of its {reason.learners} learners)"
    return f"{' and '.join(parts)} more free on a node{learners}"
