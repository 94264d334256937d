"""The series cache reads a history once while it stays the same size, and again once it grew; with a folder, a
cache started afresh loads the columns kept there instead of parsing the history again."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
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
        self.versioned = False
        """Whether its streams carry a version (a hash of the bytes, as the store's ETags would be)."""

    async def metrics_history(self, tenant: str, job_id: str, *, learner_id: int = 1) -> FileStream:
        data = self.data[job_id]

        def chunks() -> Iterator[bytes]:
            self.reads += 1
            yield data

        version = hashlib.sha256(data).hexdigest() if self.versioned else ""
        return FileStream(chunks(), len(data), version)


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


def test_a_fresh_cache_loads_the_columns_kept_on_disk_and_reads_on_what_grew(tmp_path: Path) -> None:
    facade = Histories()
    facade.versioned = True
    facade.data["j"] = _records(range(100)) + b'{"step": 100, "values": {"loss": 2.0}}'  # a last line unended

    async def total(cache: SeriesCache) -> int:
        return (await cache.window("t", "j", 1, "loss", axis="step", start=None, end=None, points=50)).total

    async def run() -> None:
        assert await total(SeriesCache(cast(SchedulerFacade, facade), folder=tmp_path)) == 101
        assert facade.reads == 1 and len(list(tmp_path.glob("*.series"))) == 1
        fresh = SeriesCache(cast(SchedulerFacade, facade), folder=tmp_path)
        assert await total(fresh) == 101 and facade.reads == 1, "the same version: loaded, not read"
        facade.data["j"] += b"\n" + _records(range(101, 150))
        reread = SeriesCache(cast(SchedulerFacade, facade), folder=tmp_path)
        assert await total(reread) == 150 and facade.reads == 2, "grown: read on from the mark kept"
        assert reread._kept[("t", "j", 1)].reader.offset == len(facade.data["j"])
        facade.data["j"] = _records(range(10))  # stored anew, shorter
        assert await total(SeriesCache(cast(SchedulerFacade, facade), folder=tmp_path)) == 10
        other = SeriesCache(cast(SchedulerFacade, facade), folder=tmp_path)
        with pytest.raises(KeyError):
            await other.history("u", "k", 1)  # another tenant's or job's history is another file
        assert await total(other) == 10

    asyncio.run(run())


def test_columns_that_cannot_be_read_are_dropped_and_the_history_read_again(tmp_path: Path) -> None:
    facade = Histories()
    facade.versioned = True
    facade.data["j"] = _records(range(100))

    async def run() -> None:
        await SeriesCache(cast(SchedulerFacade, facade), folder=tmp_path).history("t", "j", 1)
        (kept,) = tmp_path.glob("*.series")
        kept.write_bytes(kept.read_bytes()[:500])  # torn
        history = await SeriesCache(cast(SchedulerFacade, facade), folder=tmp_path).history("t", "j", 1)
        assert len(history.series["loss"].by_step.x) == 100 and facade.reads == 2

    asyncio.run(run())
