"""The series cache reads a history once while it stays the same size, and again once it grew."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import cast

import pytest

from learnerkit.scheduler.errors import UnknownMetricError
from learnerkit.scheduler.facade import FileStream, SchedulerFacade
from learnerkit.scheduler.series.cache import SeriesCache


class Histories:
    """Just enough of a facade: ``metrics_history`` over bytes per job, counting the reads of them."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.reads = 0

    async def metrics_history(self, tenant: str, job_id: str, *, learner_id: int = 1) -> FileStream:
        data = self.data[job_id]

        def chunks() -> Iterator[bytes]:
            self.reads += 1
            yield data

        return FileStream(chunks(), len(data))


def _records(steps: range) -> bytes:
    return b"".join(json.dumps({"step": s, "values": {"loss": 1.0}}).encode() + b"\n" for s in steps)


def test_a_history_is_read_once_until_it_grows() -> None:
    facade = Histories()
    facade.data["j"] = _records(range(100))
    cache = SeriesCache(cast(SchedulerFacade, facade))

    async def window() -> int:
        return (await cache.window("t", "j", 1, "loss", axis="step", start=None, end=None, points=50)).total

    async def run() -> None:
        assert await asyncio.gather(*(window() for _ in range(5))) == [100] * 5
        assert facade.reads == 1, "five charts at once, one read"
        facade.data["j"] += _records(range(100, 150))
        assert await window() == 150 and facade.reads == 2
        with pytest.raises(UnknownMetricError, match=r"has no metric 'acc' \(it has: loss\)"):
            await cache.series("t", "j", 1, "acc")
        assert facade.reads == 2

    asyncio.run(run())


def test_the_least_recently_used_history_goes_past_the_budget() -> None:
    facade = Histories()
    for job in ("a", "b", "c"):
        facade.data[job] = _records(range(100))  # 1600 bytes each (100 steps and values)
    cache = SeriesCache(cast(SchedulerFacade, facade), max_bytes=4000)

    async def run() -> None:
        for job in ("a", "b", "a", "c"):
            await cache.history("t", job, 1)
        assert facade.reads == 3, "a read once, b once, c once"
        await cache.history("t", "a", 1)
        assert facade.reads == 3, "a, used last but one, is kept"
        await cache.history("t", "b", 1)
        assert facade.reads == 4, "b, the least recently used, went out when c came in"

    asyncio.run(run())
