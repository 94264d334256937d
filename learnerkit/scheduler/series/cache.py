"""Histories read once and kept: a chart's every zoom asks for a range of the same series, and reading a
million-record history back from the object store and parsing it takes seconds where cutting a range of the kept
columns and thinning it takes milliseconds. A history that grew is read on from where it was left
(`HistoryReader`): only its new bytes are parsed. With a folder, the columns are kept on disk as well
(`stored`): a scheduler started afresh loads them instead of parsing the history again."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from learnerkit.scheduler.errors import UnknownMetricError
from learnerkit.scheduler.facade import SchedulerFacade
from learnerkit.scheduler.series import stored
from learnerkit.scheduler.series.history import Axis, History, HistoryReader, Rewritten, Series
from learnerkit.scheduler.series.stored import StoredHistory
from learnerkit.scheduler.series.window import SeriesWindow, window

MAX_KEPT_BYTES = 320 << 20
"""The bytes of the kept histories' columns (a million-point series takes 32 MB: x and y along two axes, 8 bytes
each); past it the least recently used histories go, all but the one just read."""


class SeriesCache:
    """The histories of the learners charts were asked for, by tenant, job, learner and stored size: a history that
    grows (the sidecar stores it every 30 s while its learner runs) is read again; an ended job's is kept."""

    def __init__(self, facade: SchedulerFacade, *, max_bytes: int = MAX_KEPT_BYTES, folder: Path | None = None) -> None:
        """``folder``: where the columns are kept on disk too (`stored`), for the next scheduler; none: memory only."""
        self.facade = facade
        self.max_bytes = max_bytes
        self.folder = folder
        self._kept: OrderedDict[tuple[str, str, int], StoredHistory] = OrderedDict()
        self._reading: dict[tuple[str, str, int], asyncio.Lock] = {}

    async def history(self, tenant: str, job_id: str, learner: int) -> History:
        """The learner's history; the facade's errors (an unknown job, a store that does not answer) as they are."""
        stream = await self.facade.metrics_history(tenant, job_id, learner_id=learner)
        key = (tenant, job_id, learner)
        # One read of a history at a time (two charts of a page must not parse it twice); others' go on meanwhile.
        reading = self._reading.setdefault(key, asyncio.Lock())
        async with reading:
            kept = self._kept.get(key)
            path = stored.path_of(self.folder, *key) if self.folder is not None and stream.version else None
            if kept is None and path is not None:
                kept = await asyncio.to_thread(stored.load, path)
            if kept is None or (kept.size, kept.version) != (stream.size, stream.version):
                reader = kept.reader if kept is not None else HistoryReader()
                try:
                    await asyncio.to_thread(reader.read, stream.chunks)
                except Rewritten:  # stored anew: read whole
                    reader = HistoryReader()
                    stream = await self.facade.metrics_history(tenant, job_id, learner_id=learner)
                    await asyncio.to_thread(reader.read, stream.chunks)
                kept = StoredHistory(reader, stream.size, stream.version)
                if path is not None:
                    await asyncio.to_thread(stored.save, path, kept)
            self._keep(key, kept)
            self._kept.move_to_end(key)
            found = kept.reader.history
        if not reading.locked():
            self._reading.pop(key, None)
        return found

    async def series(self, tenant: str, job_id: str, learner: int, name: str) -> Series:
        history = await self.history(tenant, job_id, learner)
        found = history.series.get(name)
        if found is None:
            has = ", ".join(history.series) or "none"
            raise UnknownMetricError(f"job {job_id!r} learner {learner} has no metric {name!r} (it has: {has})")
        return found

    def _keep(self, key: tuple[str, str, int], kept: StoredHistory) -> None:
        if self._kept.get(key) is kept:
            return
        self._kept[key] = kept
        self._kept.move_to_end(key)
        while len(self._kept) > 1 and sum(k.reader.history.nbytes for k in self._kept.values()) > self.max_bytes:
            self._kept.popitem(last=False)

    async def window(
        self,
        tenant: str,
        job_id: str,
        learner: int,
        name: str,
        *,
        axis: Axis,
        start: float | None,
        end: float | None,
        points: int,
    ) -> SeriesWindow:
        """The range asked for of a series, thinned (`window`)."""
        series = await self.series(tenant, job_id, learner, name)
        return await asyncio.to_thread(window, series, axis, start=start, end=end, points=points)

    async def index(self, tenant: str, job_id: str, learner: int) -> SeriesIndex:
        history = await self.history(tenant, job_id, learner)
        entries = tuple(SeriesEntry(s.name, len(s.by_step.x), len(s.by_time.x)) for s in history.series.values())
        return SeriesIndex(job_id, learner, entries)


@dataclass(frozen=True)
class SeriesEntry:
    name: str
    steps: int
    """Its points that have a step (the step axis' length)."""
    times: int
    """Its points that have a time."""


@dataclass(frozen=True)
class SeriesIndex:
    """The series of a learner's history."""

    job_id: str
    learner: int
    series: tuple[SeriesEntry, ...]
