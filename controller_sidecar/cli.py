"""The sidecar process: settings from the environment and the mounted config, signals, exit status.

Exit status (:mod:`controller_sidecar.exits`): 0 when the learner ended COMPLETED or HALTED, 1 when FAILED or when
the shutdown deadline ran out, 2 for a bad setting, 75 when a write held back by a lapsed lease was given up (no
final status: the scheduler requeues the job). SIGTERM/SIGINT halt the learner and store what there is; the
process ends within ``timing.shutdown_deadline_s`` whatever happens.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.exits import CONFIG_EXIT, DONE_EXIT, FAILED_EXIT, LEASE_LAPSED_EXIT
from controller_sidecar.fence import LeaseLapsedError
from controller_sidecar.runtime import Sidecar
from controller_sidecar.settings import SidecarSettings, load_settings
from controller_sidecar.status import Phase

LOGGER = logging.getLogger("controller_sidecar")
SHARED_UMASK = 0o002


def main() -> int:
    # Folders group-writable: the learner, another user of group 0, writes into and prunes what this
    # process makes under /job (restored checkpoints, data folders).
    os.umask(SHARED_UMASK)
    logging.basicConfig(
        level=os.environ.get("LEARNERKIT_SIDECAR_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = load_settings(os.environ)
    except SidecarConfigError as e:
        sys.stderr.write(f"controller-sidecar: {e}\n")
        return CONFIG_EXIT
    return asyncio.run(serve(settings))


async def serve(settings: SidecarSettings) -> int:
    terminate = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, terminate.set)
    sidecar = Sidecar(settings, terminate)
    run = asyncio.create_task(sidecar.run())
    stop = asyncio.create_task(terminate.wait())
    await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
    if not run.done():
        LOGGER.info("terminating: finishing within %.1fs", settings.timing.shutdown_deadline_s)
        done, _ = await asyncio.wait({run}, timeout=settings.timing.shutdown_deadline_s)
        if not done:
            held_back = sidecar.fence.held_back
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            if held_back:
                return lease_lapsed(f"the shutdown deadline of {settings.timing.shutdown_deadline_s:.1f}s ran out")
            LOGGER.error("shutdown deadline of %.1fs ran out", settings.timing.shutdown_deadline_s)
            return FAILED_EXIT
    stop.cancel()
    try:
        phase = run.result()
    except LeaseLapsedError as e:
        return lease_lapsed(str(e))
    return DONE_EXIT if phase in (Phase.COMPLETED, Phase.HALTED) else FAILED_EXIT


def lease_lapsed(why: str) -> int:
    """Give up a write held back by a lapsed lease: one line that says so (the scheduler shows a dead sidecar's
    last line), and the status that has the job requeued rather than failed."""
    LOGGER.error(
        "gave up while the sidecar's lease may have lapsed (etcd unanswered): %s; exiting with status %d, no final"
        " status: the platform's trouble, the job resumes from its last checkpoint",
        why,
        LEASE_LAPSED_EXIT,
    )
    return LEASE_LAPSED_EXIT
