"""One watch of etcd's jobs' root, fanned out to every open stream, each filtered to its tenant.

Positions are etcd revisions (`changes.Position`), so they stay meaningful across a scheduler restart. The hub
keeps the last `BUFFERED` events: a stream that asks to resume after a position the buffer still covers gets
every event after it, in order; one asking after a position the buffer no longer covers (evicted, from before this
scheduler started, or unknown) gets a ``snapshot`` event first, which says "read the current state again", and
the live events after it. A stream whose client reads too slowly (`QUEUED` events waiting) is ended with a
``snapshot`` too late to send: the client reconnects with its last id and resumes from the buffer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

from controller_sidecar.etcdstore import WatchEvent
from learnerkit.scheduler.events.changes import LAST, Change, Event, Position, change_of

LOGGER = logging.getLogger(__name__)
BUFFERED = 20_000
"""Events kept for resuming; at ~200 bytes each, a few MB."""
QUEUED = 1_000
"""Events waiting for one slow stream before it is ended."""
STREAMS_PER_TENANT = 32
"""Streams open at once for one tenant (browsers' tabs, `job status --follow`s)."""
REPORTED_KEYS = 10_000
"""Keys whose skipped changes were logged, each once; past this many the record starts again."""

Watch = Callable[[], AsyncGenerator[WatchEvent, None]]
"""etcd's changes under the root, from the revision after `Revision`'s."""
Revision = Callable[[], Awaitable[int]]
TenantOf = Callable[[Change], Awaitable[str | None]]
"""The tenant of the job or sweep a change is of, looked up in etcd; None when it has none (not a job, a sweep)."""


class TooManyStreams(Exception):
    """A tenant or an address holds its most streams; the message names the cap."""


@dataclass(frozen=True)
class Snapshot:
    """Sent first to a stream whose position is no longer covered: re-read the state, then follow from here."""

    position: Position

    def sse(self) -> bytes:
        return f"id: {self.position}\nevent: snapshot\ndata: {{}}\n\n".encode()

    def as_json(self) -> dict[str, str]:
        return {"id": str(self.position), "event": "snapshot"}


Item = Event | Snapshot


@dataclass(eq=False)
class Stream:
    tenant: str
    address: str
    queue: asyncio.Queue[Item | None] = field(default_factory=lambda: asyncio.Queue(QUEUED))
    ended: bool = False


class EventHub:
    """Started with `run` (a task for the server's life); streams open with `subscribe`."""

    def __init__(self, root: str, *, streams_per_address: int, streams_per_tenant: int = STREAMS_PER_TENANT) -> None:
        self.root = root.rstrip("/")
        self.streams_per_address = streams_per_address
        self.streams_per_tenant = streams_per_tenant
        self._buffer: deque[Event] = deque(maxlen=BUFFERED)
        self._horizon = Position(0, LAST)
        """Every event after this position is in the buffer (set when the watch starts, moved on eviction)."""
        self._latest = Position(0, 0)
        self._streams: set[Stream] = set()
        self._tenants: dict[str, str] = {}
        self._closed = False
        self._listeners: list[Callable[[Event], None]] = []
        self._reported: set[str] = set()
        self.ready = asyncio.Event()

    @property
    def latest(self) -> Position:
        """The position of the newest event seen (or the watch's start): a page drawn now is current up to it."""
        return self._latest

    async def run(self, start_revision: Revision, watch: Watch, tenant_of: TenantOf) -> None:
        """Follow etcd until cancelled; ``tenant_of`` names the tenant of a job seen first by a key other than its
        status (a job submitted before this scheduler started), and of a sweep (its state does not name it). A change
        that fails (a key or record that does not parse, a lookup etcd did not answer) is skipped, its key logged
        once: one bad key never ends every stream."""
        revision = await start_revision()
        self._horizon = Position(revision, LAST)
        self._latest = Position(revision, LAST)  # a page drawn now is current with all of that revision
        self.ready.set()
        index, last_revision = 0, revision
        async with aclosing(watch()) as changes:
            async for watched in changes:
                try:
                    change = change_of(watched, self.root)
                    if change is None:
                        continue
                    tenant = change.tenant or self._tenants.get(change.subject) or await tenant_of(change)
                except Exception as e:  # noqa: BLE001 - any failure of one key's change; cancelling is no Exception
                    self._skipped(watched, e)
                    continue
                if tenant is None:
                    continue
                index = index + 1 if watched.revision == last_revision else 0
                last_revision = watched.revision
                self.publish(Event(Position(watched.revision, index), tenant, change))

    def _skipped(self, watched: WatchEvent, error: Exception) -> None:
        if watched.key in self._reported:
            return
        if len(self._reported) >= REPORTED_KEYS:
            self._reported.clear()
        self._reported.add(watched.key)
        LOGGER.warning(
            "event stream: skipped the change of %s at revision %d (%s: %s); later failures of this key are not logged",
            watched.key,
            watched.revision,
            type(error).__name__,
            error,
        )

    def listen(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener`` with every event as it is published, on the loop (it must not block)."""
        self._listeners.append(listener)

    def publish(self, event: Event) -> None:
        change = event.change
        if change.kind == "job-deleted":
            self._tenants.pop(change.subject, None)
        else:
            self._tenants[change.subject] = event.tenant
        if len(self._buffer) == self._buffer.maxlen:
            self._horizon = self._buffer[0].position
        self._buffer.append(event)
        self._latest = event.position
        for stream in list(self._streams):
            if stream.tenant == event.tenant:
                self._offer(stream, event)
        for listener in self._listeners:
            listener(event)

    def subscribe(self, tenant: str, address: str, after: Position | None) -> Stream:
        """A new stream of ``tenant``'s events after ``after`` (None: from now). `TooManyStreams` past a cap."""
        if self._closed:
            raise TooManyStreams("the scheduler is stopping; reconnect shortly")
        by_tenant = Counter(s.tenant for s in self._streams)
        by_address = Counter(s.address for s in self._streams)
        if by_tenant[tenant] >= self.streams_per_tenant:
            raise TooManyStreams(
                f"tenant {tenant} has {by_tenant[tenant]} event streams open, its most; close some (a tab, a --follow)"
            )
        if by_address[address] >= self.streams_per_address:
            raise TooManyStreams(
                f"{by_address[address]} event streams are open from {address}, the most from one address "
                "(half of LEARNERKIT_API_MAX_CONNECTIONS_PER_ADDRESS); close some"
            )
        stream = Stream(tenant, address)
        if after is not None:
            if after < self._horizon or after > Position(self._latest.revision, LAST):
                self._offer(stream, Snapshot(self._latest))
            else:
                for event in self._buffer:
                    if event.position > after and event.tenant == tenant:
                        self._offer(stream, event)
        self._streams.add(stream)
        return stream

    def unsubscribe(self, stream: Stream) -> None:
        self._streams.discard(stream)

    def close(self) -> None:
        """End every open stream, and refuse new ones (the server is shutting down: it waits for its responses to
        end)."""
        self._closed = True
        for stream in list(self._streams):
            self._end(stream)

    def _offer(self, stream: Stream, item: Item) -> None:
        if stream.ended:
            return
        try:
            stream.queue.put_nowait(item)
        except asyncio.QueueFull:
            LOGGER.info("ended a %s event stream of %s: its client reads too slowly", stream.tenant, stream.address)
            self._end(stream)

    def _end(self, stream: Stream) -> None:
        stream.ended = True
        self._streams.discard(stream)
        if stream.queue.full():
            stream.queue.get_nowait()  # room for the end mark; the client resumes from its last id
        stream.queue.put_nowait(None)


async def items(stream: Stream, *, heartbeat_s: float, still_allowed: Callable[[], bool]) -> AsyncIterator[Item | None]:
    """The stream's items as they come; None every ``heartbeat_s`` without one (a keep-alive). Ends when the hub
    ends the stream or ``still_allowed`` turns false (its session ended, its token was revoked)."""
    while True:
        try:
            item = await asyncio.wait_for(stream.queue.get(), heartbeat_s)
        except TimeoutError:
            if not still_allowed():
                return
            yield None
            continue
        if item is None:
            return
        yield item


__all__ = ["Change", "EventHub", "Snapshot", "Stream", "TooManyStreams", "items"]
