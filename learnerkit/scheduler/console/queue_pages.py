"""The Queue page (`/ui/queue`): the tenant's queued jobs in the order the next pass takes them, why each waits,
its place in the tenant's queue and in the whole queue (other tenants' jobs counted, never named), what would free
it, and the preemptions that touched the tenant. Live through the session's event stream (`static/queue.js`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from learnerkit.scheduler.console import queue_views
from learnerkit.scheduler.console.access import Current
from learnerkit.scheduler.console.rendering import Renderer
from learnerkit.scheduler.console.views import readable_time
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.facade import SchedulerFacade


def add_queue_routes(router: APIRouter, facade: SchedulerFacade, render: Renderer, events: EventHub | None) -> None:
    @router.get("/queue")
    async def queue_page(session: Current) -> Response:
        # Taken before the queue is read, as for the other live pages: a change in between is not lost.
        after = str(events.latest) if events is not None and events.ready.is_set() else ""
        queue = await facade.queue(session.tenant)
        return render.page(
            "queue.html.j2",
            session=session,
            title="Queue",
            queue=queue,
            preemptions=[queue_views.preemption_row(p) for p in queue.preemptions],
            queue_after=after,
            readable_time=readable_time,
        )
