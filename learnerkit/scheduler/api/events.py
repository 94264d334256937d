"""``GET /v1/events``: the tenant's event stream (Server-Sent Events) for API clients, by bearer token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response

from learnerkit.scheduler.api.auth import TokenStore
from learnerkit.scheduler.events.hub import EventHub, TooManyStreams
from learnerkit.scheduler.events.responses import event_stream, resume_point

EVENTS_PATH = "/v1/events"
_STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the tenant's events as they happen (`text/event-stream`): `job`, `job-deleted`, `attempt`, "
        "`learner`, `metrics`, and `snapshot` when the asked-for position is no longer available",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    429: {"description": "the tenant or the address holds its most streams"},
}


def events_router(
    hub: EventHub, tenant_of: Callable[..., Awaitable[str]], unauthorized: dict[int | str, Any]
) -> APIRouter:
    """``tenant_of``: the API's bearer-token dependency."""
    router = APIRouter(prefix="/v1", tags=["events"], responses=unauthorized)

    async def stream(
        request: Request,
        after: Annotated[str | None, Query(description="resume after this event id (a page's position)")] = None,
        last_event_id: Annotated[str | None, Header(description="resume after this event id; over `after`")] = None,
    ) -> Response:
        tokens: TokenStore = request.app.state.tokens
        header = request.headers.get("authorization")
        tenant = tokens.cached(header) or await tenant_of(request, None)  # checked already: the route's dependency
        address = request.client.host if request.client else ""
        try:
            return event_stream(
                hub,
                tenant,
                address,
                resume_point(last_event_id, after),
                still_allowed=lambda: tokens.cached(header) is not None,
            )
        except TooManyStreams as e:
            return JSONResponse({"error": "too_many_streams", "message": str(e)}, status_code=429)

    router.add_api_route(
        "/events",
        stream,
        methods=["GET"],
        response_class=Response,
        responses=_STREAM_RESPONSE,
        dependencies=[Depends(tenant_of)],
    )
    return router
