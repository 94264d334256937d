"""When a learner is lost: its sidecar died or is gone without a lease, it stopped renewing its lease, it never
reported, or its container ended without learner-run's exit record. Each check reads what the monitor last saw
of the job, and keeps on it since when it has seen a learner missing or ended."""

from __future__ import annotations

from dataclasses import dataclass

from controller_sidecar.exits import LEASE_LAPSED_EXIT
from controller_sidecar.status import Phase
from learnerkit.scheduler.backends.protocol import LearnerEnd, SidecarStates
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


SIGKILLED = 128 + 9
"""A container's exit status when its main process was killed with SIGKILL (by the kernel's OOM killer, or a
runtime that gave up waiting)."""


@dataclass(frozen=True)
class LivenessTimes:
    """The clocks of one monitoring step."""

    wall: float
    """Now on the wall clock (admission times are wall times)."""
    monotonic: float
    """Now on the monotonic clock (how long a learner has been missing)."""
    watched_from: float
    """Monotonic time since which every step succeeded: time missing counts from no earlier."""


def lost_learners(
    tracked: Tracked, sidecars: SidecarStates, times: LivenessTimes, lease_ttl_s: float, renewal_grace_s: float
) -> dict[int, str]:
    """Learners whose sidecar is lost: it exited without a final status; it is gone from the backend and holds no
    lease; it runs but has not renewed its lease for ``renewal_grace_s``; or it never reported at all.

    A lease that lapses while the sidecar still runs (etcd paused or out of reach for a while) is a blip, not a
    loss: the sidecar grants itself a new lease once etcd answers and keeps its job. Time without a lease counts
    only over steps that succeeded (``times.watched_from``): an outage the scheduler saw too counts against
    nobody.
    """
    state, lost = tracked.state, {}
    for n in range(1, tracked.manifest.resources.learners + 1):
        record = tracked.records.get(n)
        this_attempt = record is not None and record.sequence >= state.first_sequence
        if this_attempt and record is not None and record.phase.terminal:
            tracked.missing_since.pop(n, None)
            continue
        if n in sidecars.exited:
            lost[n] = _exited_why(sidecars, n) + _log_ending(sidecars.log_tails.get(n, ""))
            continue
        if n in tracked.alive:
            tracked.seen_alive.add(n)
            tracked.missing_since.pop(n, None)
            continue
        since = max(tracked.missing_since.setdefault(n, times.monotonic), times.watched_from)
        missing_for = times.monotonic - since
        if n not in sidecars.running:
            if missing_for > 2 * lease_ttl_s:
                lost[n] = "its sidecar is gone from the backend and holds no lease"
        elif n in tracked.seen_alive or this_attempt:
            if missing_for > renewal_grace_s:
                lost[n] = f"its sidecar runs but has not renewed its lease for {renewal_grace_s:.0f}s"
        elif state.admitted_at is not None and times.wall - state.admitted_at > STARTUP_GRACE_S + 2 * lease_ttl_s:
            lost[n] = f"its sidecar never reported within {STARTUP_GRACE_S:.0f}s"
    return lost


def _exited_why(sidecars: SidecarStates, n: int) -> str:
    ended_by, code = sidecars.ended_by.get(n), sidecars.exited[n]
    if code == LEASE_LAPSED_EXIT:
        return f"its sidecar gave up on its lapsed lease (exit status {code}) before reporting a final status"
    if ended_by:
        return f"its pod ended before a final status ({ended_by})"
    return f"its sidecar exited with status {code} before reporting a final status"


LOG_ENDING_CHARS = 300
"""How much of a dead sidecar's last log line goes into the job's reason (a traceback's last line fits); a longer
line keeps its start and its end, where an error's own words and its final cause are."""


def _log_ending(tail: str) -> str:
    """``; its log ends: <last line>`` for a sidecar's log tail, empty when it left none."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    if len(last) > LOG_ENDING_CHARS:
        kept = LOG_ENDING_CHARS - 1
        last = last[: kept // 2] + "…" + last[len(last) - (kept - kept // 2) :]
    return f"; its log ends: {last}"


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
    tracked: Tracked, watching: set[int], ended: dict[int, LearnerEnd], now: float, watching_since: float | None
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
            lost[n] = _ended_why(ended[n])
    return lost


def _ended_why(end: LearnerEnd) -> str:
    """Why a learner container ended without learner-run's record: killed (the record never had a chance), or an
    entrypoint that is not learner-run."""
    if end.oom_killed:
        return (
            f"the learner container was killed for using more memory than its limit (out of memory, exit code "
            f"{end.exit_code}): raise `memory` in the manifest"
        )
    if end.exit_code == SIGKILLED:
        return (
            f"the learner container was killed (exit code {SIGKILLED}, SIGKILL) before learner-run could write its "
            "exit record"
        )
    return (
        f"the learner container ended (exit code {end.exit_code}) without learner-run's exit record: "
        "is learner-run the image's entrypoint?"
    )
