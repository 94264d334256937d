"""Time as a dependency, so that retry, backoff and queueing are tested on a fake clock in zero wall time."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and intervals)."""

    def wall(self) -> float:
        """Seconds since the epoch (for timestamps that people read)."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; cancellable."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


SYSTEM_CLOCK: Clock = SystemClock()


async def event_or_timeout(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes; whether it was set."""
    try:
        await asyncio.wait_for(event.wait(), timeout=timeout_s)
    except TimeoutError:
        return False
    return True
