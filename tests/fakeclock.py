"""A fake clock for tests of time-driven logic: ``sleep`` advances virtual time at once (zero wall time)."""

from __future__ import annotations

import asyncio


class FakeClock:
    """Implements controller_sidecar.clock.Clock; records every sleep so tests can check the delays."""

    def __init__(self, start: float = 1_000.0, wall_start: float = 1_767_225_600.0) -> None:
        self.now = start
        self.wall_offset = wall_start - start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now + self.wall_offset

    async def sleep(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.sleeps.append(seconds)
        self.now += seconds
        # Let the other tasks run, as a real sleep would.
        await asyncio.sleep(0)
