"""`/healthz` answers 503 with the reason once the control loop has completed no step for `loop_stall_s`: here the
loop is stalled by a backend that does not answer, and the clock is moved past the limit."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.core.test_step_concurrency import HANG_GUARD_S, Harness
from tests.unit.scheduler.fakefacade import FakeFacade

STALL_S = 30.0


def test_healthz_is_unhealthy_once_the_loop_stalls_and_healthy_again_when_it_steps(
    tenants: Tenants, fake: FakeFacade
) -> None:
    h = Harness()
    h.scheduler.shared.options = replace(h.scheduler.shared.options, loop_stall_s=STALL_S, nodes_interval_s=0.0)
    answers = threading.Event()
    listing = threading.Event()
    nodes = h.backend.nodes

    def stuck_nodes() -> list:  # type: ignore[type-arg]
        listing.set()
        answers.wait(HANG_GUARD_S)
        return nodes()

    h.backend.nodes = stuck_nodes  # type: ignore[method-assign]
    app = create_app(fake, tenants.path, health=h.scheduler.loop.stalled)

    async def scenario(client: TestClient) -> None:
        stop = asyncio.Event()
        loop = asyncio.create_task(h.scheduler.loop.run(stop))
        assert await asyncio.to_thread(listing.wait, HANG_GUARD_S)  # the first step waits on the backend
        healthy = await asyncio.to_thread(client.get, "/healthz")
        assert (healthy.status_code, healthy.json()) == (200, {"status": "ok"})
        h.clock.now += STALL_S + 1
        stalled = await asyncio.to_thread(client.get, "/healthz")
        assert stalled.status_code == 503, stalled.text
        assert stalled.json() == {
            "status": "unhealthy",
            "reason": f"the control loop has completed no step for {STALL_S + 1:.0f}s (more than {STALL_S:g}s)",
        }
        listing.clear()
        answers.set()  # the backend answers: the step completes, the loop is healthy again
        assert await asyncio.to_thread(listing.wait, HANG_GUARD_S)
        again = await asyncio.to_thread(client.get, "/healthz")
        assert again.status_code == 200, again.text
        stop.set()
        await asyncio.wait_for(loop, HANG_GUARD_S)

    with TestClient(app) as client:
        asyncio.run(scenario(client))
