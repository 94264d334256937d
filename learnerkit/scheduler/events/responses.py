"""A stream as an HTTP response: ``text/event-stream``, one `EventHub` subscription for as long as it is open."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from starlette.responses import StreamingResponse

from learnerkit.scheduler.events.changes import Position
from learnerkit.scheduler.events.hub import EventHub, items

HEARTBEAT_S = 15.0
"""A comment line this often keeps proxies from closing a quiet stream and finds a session that ended."""
RETRY_MS = 1000
"""How long a browser's EventSource waits before reconnecting."""


def resume_point(last_event_id: str | None, after: str | None) -> Position | None:
    """Where to resume: the ``Last-Event-ID`` header (a reconnecting EventSource sends it) over ``?after=`` (the
    position a page was drawn at); None when neither is given: from now. Text that is no position resumes from
    before everything, so the stream starts with a snapshot."""
    text = last_event_id if last_event_id is not None else after
    if text is None or text == "":
        return None
    return Position.parse(text) or Position(-1, 0)


def event_stream(
    hub: EventHub,
    tenant: str,
    address: str,
    after: Position | None,
    *,
    still_allowed: Callable[[], bool],
    heartbeat_s: float = HEARTBEAT_S,
) -> StreamingResponse:
    """The response; `TooManyStreams` (raised now, before any byte is sent) past a cap."""
    stream = hub.subscribe(tenant, address, after)

    async def body() -> AsyncIterator[bytes]:
        try:
            yield f"retry: {RETRY_MS}\n: position {hub.latest}\n\n".encode()
            async for item in items(stream, heartbeat_s=heartbeat_s, still_allowed=still_allowed):
                yield b": keep-alive\n\n" if item is None else item.sse()
        finally:
            hub.unsubscribe(stream)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
