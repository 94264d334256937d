"""A sidecar that ends before its learner's final status is started again, a few times, on the pair's kept
``/job``: its progress there lets it go on (one killed while storing stores the outputs again, and its final
status says which are complete). Past the restarts, or where the backend cannot restart it, the learner is lost
(:mod:`learnerkit.scheduler.core.liveness`). The backend keeps the count with the sidecar (a container label on
Docker), so a scheduler restarted in between goes on counting rather than starting over."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.backends.protocol import Backend, SidecarStates
from learnerkit.scheduler.core.tracking import Tracked

LOGGER = logging.getLogger(__name__)
MAX_SIDECAR_RESTARTS = 3
"""Restarts per learner: a sidecar that keeps ending (a bad setting, a store that refuses it) is lost after these."""


async def restart_ended_sidecars(backend: Backend, tracked: Tracked, sidecars: SidecarStates) -> SidecarStates:
    """Start again each ended sidecar of ``tracked`` whose learner has no final status this attempt, up to
    :data:`MAX_SIDECAR_RESTARTS` each; the sidecars' states with those started again counted as running. Call it
    under the job's backend lock, so that no teardown runs meanwhile."""
    state, restarted = tracked.state, set()
    for n, code in sorted(sidecars.exited.items()):
        record = tracked.records.get(n)
        if record is not None and record.sequence >= state.first_sequence and record.phase.terminal:
            continue
        count = max(tracked.sidecar_restarts.get(n, 0), sidecars.restarts.get(n, 0))
        if count >= MAX_SIDECAR_RESTARTS:
            continue
        tracked.sidecar_restarts[n] = count + 1
        try:
            done = await asyncio.to_thread(backend.restart_sidecar, state.job_id, n)
        except LearnerkitError as e:
            LOGGER.warning("job %s: learner %d's sidecar could not be started again: %s", state.job_id, n, e)
            continue
        if done:
            LOGGER.warning(
                "job %s: learner %d's sidecar exited with status %d before its final status; started again (%d of %d)",
                state.job_id,
                n,
                code,
                count + 1,
                MAX_SIDECAR_RESTARTS,
            )
            restarted.add(n)
    if not restarted:
        return sidecars
    exited = {n: code for n, code in sidecars.exited.items() if n not in restarted}
    return replace(sidecars, exited=exited, running=sidecars.running | restarted)
