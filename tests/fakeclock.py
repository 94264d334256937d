"""A Clock for tests whose sleep advances virtual time at once: retry and backoff run in zero wall time."""

from __future__ import annotations

import asyncio


class FakeClock:
    def __init__(self, start: float = 1_000.0, epoch: float = 1_700_000_000.0) -> None:
        self.now = start
        self.epoch = epoch
        self.sleeps: list[float] = []
        """Every sleep asked for, in order."""

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.epoch + self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)  # still a suspension point, as a real sleep is
