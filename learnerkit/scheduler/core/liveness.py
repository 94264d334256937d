"""When a learner is lost: its sidecar died, its lease expired, it never reported, or its container ended without
learner-run's exit record. Each check reads what the monitor last saw of the job, and keeps on it since when it
has seen a learner missing or ended."""

from __future__ import annotations

from controller_sidecar.status import Phase
from learnerkit.scheduler.core.tracking import Tracked

STARTUP_GRACE_S = 60.0
"""A learner whose sidecar never took its lease is lost only after this long (image start, etcd connect)."""
LEARNER_ENDED_MARGIN_S = 15.0
"""A learner container that ended while its sidecar, holding its lease, still reports PROCESSING fails the job
after the job's halt grace plus this. learner-run writes its exit record before it exits, and the sidecar, polling
for it every 0.1 s, then reports STORING (each retry of that delivery waits at most 5 s); a sidecar that is halting
(a halt asked for, or stopped by the kubelet once the learner container ended) waits the halt grace + 5 s for the
record and then reports a final status of its own. Either arrives within this grace, so a normal ending is never
failed: only a learner that never wrote the record (an image whose entrypoint is not learner-run) is."""


def lost_learners(tracked: Tracked, exited: dict[int, int], now: float, lease_ttl_s: float) -> dict[int, str]:
    """Learners whose sidecar died: its container exited without a final status, or its lease expired."""
    state, lost = tracked.state, {}
    for n in range(1, tracked.manifest.resources.learners + 1):
        record = tracked.records.get(n)
        final = record is not None and record.sequence >= state.first_sequence and record.phase.terminal
        if final:
            continue
        if n in exited:
            lost[n] = f"its sidecar exited with status {exited[n]} before reporting a final status"
        elif n in tracked.alive:
            tracked.seen_alive.add(n)
            tracked.missing_since.pop(n, None)
        elif n in tracked.seen_alive:
            since = tracked.missing_since.setdefault(n, now)
            if now - since > 2 * lease_ttl_s:
                lost[n] = "its sidecar's lease expired"
        elif (
            state.admitted_at is not None
            and now - state.admitted_at > STARTUP_GRACE_S + 2 * lease_ttl_s
            and (record is None or record.sequence < state.first_sequence)
        ):
            lost[n] = f"its sidecar never reported within {STARTUP_GRACE_S:.0f}s"
    return lost


def watching_for_exit(tracked: Tracked) -> set[int]:
    """Learners whose sidecar, holding its lease, reports PROCESSING this attempt: it waits for learner-run's
    exit record (before PROCESSING it has not started the learner's command, or looked for the record)."""
    first = tracked.state.first_sequence
    return {
        n
        for n, record in tracked.records.items()
        if record.sequence >= first and record.phase is Phase.PROCESSING and n in tracked.alive
    }


def ended_without_exit_record(
    tracked: Tracked, watching: set[int], ended: dict[int, int], now: float, watching_since: float | None
) -> dict[int, str]:
    """Learners whose container ended while their sidecar kept waiting for the exit record, past the grace.

    On Docker the sidecar notices this itself (the learner's cgroup empties) and reports first; on Kubernetes
    it cannot, and this is what ends the job. The grace is measured on the scheduler's monotonic clock (``now``)
    from the first step that saw it, and no earlier than ``watching_since`` (see the loop's), kept in memory
    only: a restarted scheduler starts it again, later, never sooner, and the container stays ended
    (``restartPolicy: Never``; an exited Docker container), so the job still ends.
    """
    watched_from = watching_since if watching_since is not None else now
    grace = tracked.manifest.extensions.halt_grace + LEARNER_ENDED_MARGIN_S
    for n in set(tracked.ended_since) - (watching & ended.keys()):
        del tracked.ended_since[n]  # the sidecar moved on (STORING, a final status) or lost its lease
    lost: dict[int, str] = {}
    for n in sorted(watching & ended.keys()):
        since = max(tracked.ended_since.setdefault(n, now), watched_from)
        if now - since > grace:
            lost[n] = (
                f"the learner container ended (exit code {ended[n]}) without learner-run's exit record: "
                "is learner-run the image's entrypoint?"
            )
    return lost
