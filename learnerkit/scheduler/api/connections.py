"""Slow and many clients: deadlines on reading a request and caps on open connections, in the HTTP protocol.

uvicorn's httptools protocol waits for a request head as long as the client likes (its keep-alive timeout runs only
between requests, and any byte stops it), waits as long for a body, and takes every connection it is offered: one
client sending a byte every few seconds on many connections held the API's file descriptors. `GuardedProtocol`
(on top of `BoundedHeadProtocol`) bounds all three, before the application sees anything:

- a request head not complete `head_timeout_s` after the connection opened, or after the previous response, is
  answered 408 and the connection closed;
- a body that sends nothing for `body_idle_s`, or is not complete `body_total_s` after its head, likewise (408 if
  no response has started, else just closed). Time the application leaves the body unread does not count as idle:
  it is the server that waits then, not the client. A request answered before its body has all come (a refusal)
  has the rest read and dropped for `head_timeout_s` at most, then its connection closed (closing at once could
  reset the connection before the client has read the answer);
- a connection past `max_per_address` open from its client address is answered 429, one past `max_total` open in
  all 503, naming the setting, and closed before anything is read.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, cast

from learnerkit.scheduler.api.headers import BoundedHeadProtocol
from learnerkit.scheduler.config.settings import (
    BODY_GRACE_S,
    DEFAULT_HEAD_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    SchedulerSettings,
)

REFUSED_RETRY_AFTER_S = 5


@dataclass(frozen=True)
class ConnectionLimits:
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    body_idle_s: float = 60.0 + BODY_GRACE_S
    body_total_s: float = 3600.0 + BODY_GRACE_S
    max_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    max_total: int = DEFAULT_MAX_CONNECTIONS

    @classmethod
    def from_settings(cls, settings: SchedulerSettings) -> ConnectionLimits:
        return cls(
            head_timeout_s=settings.api.head_timeout_s,
            body_idle_s=settings.limits.upload_idle_s + BODY_GRACE_S,
            body_total_s=settings.limits.upload_total_s + BODY_GRACE_S,
            max_per_address=settings.api.max_connections_per_address,
            max_total=settings.api.max_connections,
        )


class OpenConnections:
    """The connections one server holds, per client address and in all."""

    def __init__(self) -> None:
        self.by_address: Counter[str] = Counter()
        self.total = 0

    def admit(self, address: str, limits: ConnectionLimits) -> tuple[int, str] | None:
        """Count a new connection from ``address``; or the status and reason to refuse it with, counting nothing."""
        if self.total >= limits.max_total:
            return 503, (
                f"the scheduler holds {self.total} connections, its most "
                "(LEARNERKIT_API_MAX_CONNECTIONS); try again shortly"
            )
        if self.by_address[address] >= limits.max_per_address:
            return 429, (
                f"{self.by_address[address]} connections are open from {address}, the most from one address "
                "(LEARNERKIT_API_MAX_CONNECTIONS_PER_ADDRESS); close some or try again shortly"
            )
        self.by_address[address] += 1
        self.total += 1
        return None

    def release(self, address: str) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]


class GuardedProtocol(BoundedHeadProtocol):
    """`BoundedHeadProtocol` with the deadlines and caps above; `guarded_protocol` makes one per server."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    open_connections: ClassVar[OpenConnections]
    _address: str | None = None
    _deadline: asyncio.TimerHandle | None = None
    _body_deadline: asyncio.TimerHandle | None = None
    _in_body = False
    _draining = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        refusal = self.open_connections.admit(address, self.limits)
        if refusal is not None:
            status, why = refusal
            self._refuse(why, status, retry_after_s=REFUSED_RETRY_AFTER_S, log=False)
            return
        self._address = address
        self._arm(self.limits.head_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self._address is not None:
            self.open_connections.release(self._address)
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_body and not self._draining:  # reading a body: its bytes came, the idle wait starts again
            self._arm(self.limits.body_idle_s, self._body_idle)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self._refused:
            return
        self._cancel()
        self._in_body = True
        self._arm(self.limits.body_idle_s, self._body_idle)
        self._body_deadline = self.loop.call_later(
            self.limits.body_total_s,
            self._timed_out,
            f"the request body was not complete {self.limits.body_total_s:g} s after its head",
        )

    def on_message_complete(self) -> None:
        self._cancel()
        drained, self._in_body, self._draining = self._draining, False, False
        super().on_message_complete()
        if drained and not self._refused:  # answered already: the next request's head may start now
            self._arm(self.limits.head_timeout_s, self._head_timed_out)

    def on_response_complete(self) -> None:
        if self._in_body and not self.transport.is_closing():
            # Answered before its body had all come (a refusal). Closing now could reset the connection before
            # the client reads the answer; the rest is read and dropped for the head timeout at most instead.
            self._draining = True
            self._arm(self.limits.head_timeout_s, self._close)
        super().on_response_complete()
        if not self.transport.is_closing() and self._reading_head and not self._refused:
            self._arm(self.limits.head_timeout_s, self._head_timed_out)

    def _close(self) -> None:
        self._cancel()
        self.transport.close()

    def _head_timed_out(self) -> None:
        self._timed_out(f"the request head was not complete within {self.limits.head_timeout_s:g} s")

    def _body_idle(self) -> None:
        if self.flow.read_paused:  # the application has not taken the last bytes yet
            self._arm(self.limits.body_idle_s, self._body_idle)
            return
        self._timed_out(f"the request body sent nothing for {self.limits.body_idle_s:g} s")

    def _timed_out(self, why: str) -> None:
        self._cancel()
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and self.cycle.response_started and not self.cycle.response_complete
        if answering or self._draining:
            self.logger.warning("closed the connection of %s: %s", self.client, why)
            self._refused = True
            self.transport.close()
            return
        self._refuse(why, 408)

    def _arm(self, delay_s: float, then: Callable[[], None]) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(delay_s, then)

    def _cancel(self) -> None:
        for handle in (self._deadline, self._body_deadline):
            if handle is not None:
                handle.cancel()
        self._deadline = self._body_deadline = None


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedProtocol]:
    """The protocol class for one server: these limits, and connections counted for that server alone."""
    attributes = {"limits": limits, "open_connections": OpenConnections()}
    return cast(type[GuardedProtocol], type("GuardedProtocol", (GuardedProtocol,), attributes))
