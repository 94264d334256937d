"""A job's attempt that ends has its learners' metric series built into columns on the scheduler's disk, beside the
loop, so that the first view ever of its history does not parse it (docs/console.md, "Long histories")."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.events.changes import Change, Event, Position
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.facade import FileStream
from learnerkit.scheduler.series.cache import SeriesCache
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade, view


class Stored(FakeFacade):
    """Histories with a version, as the store's ETags give them, and a count of their reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def metrics_history(self, tenant: str, job_id: str, *, learner_id: int = 1) -> FileStream:
        await super().metrics_history(tenant, job_id, learner_id=learner_id)  # its tenant check
        data = self.jobs[job_id].metrics

        def chunks() -> Iterator[bytes]:
            self.reads += 1
            yield data

        return FileStream(chunks(), len(data), hashlib.sha256(data).hexdigest())


def history(steps: range) -> bytes:
    return b"".join(json.dumps({"step": s, "values": {"loss": 1 / (s + 1)}}).encode() + b"\n" for s in steps)


def job_event(job_id: str, status: str, revision: int) -> Event:
    return Event(Position(revision, 0), "team-a", Change("job", job_id, {"status": status}, tenant="team-a"))


def test_a_job_that_ended_has_its_columns_built_before_anyone_looks(tenants: Tenants, tmp_path: Path) -> None:
    facade = Stored()
    facade.add(view("a-1", "team-a"), metrics=history(range(500)))

    async def run() -> None:
        hub = EventHub("/lk/jobs", streams_per_address=1)
        app = create_app(facade, tenants.path, events=hub, series_folder=tmp_path)
        hub.publish(job_event("a-1", "PROCESSING", 5))
        await app.state.series_prebuild.drain()
        assert facade.reads == 0, "a running job's history is left to its views"
        hub.publish(job_event("a-1", "COMPLETED", 6))
        await app.state.series_prebuild.drain()
        assert facade.reads == 1
        fresh = SeriesCache(facade, folder=tmp_path)  # a view after the scheduler restarted, nothing in memory
        found = await fresh.window("team-a", "a-1", 1, "loss", axis="step", start=None, end=None, points=100)
        assert found.total == 500
        assert facade.reads == 1, "the first view loaded the columns built at the job's end, not the history"

    asyncio.run(run())


def test_a_build_that_fails_is_logged_and_the_next_built(
    tenants: Tenants, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    facade = Stored()
    facade.add(view("a-1", "team-a"), metrics=history(range(50)))

    async def run() -> None:
        hub = EventHub("/lk/jobs", streams_per_address=1)
        app = create_app(facade, tenants.path, events=hub, series_folder=tmp_path)
        hub.publish(job_event("gone-1", "HALTED", 5))  # deleted meanwhile: the facade does not know it
        hub.publish(job_event("a-1", "PREEMPTED", 6))
        await app.state.series_prebuild.drain()

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert facade.reads == 1
    assert any("gone-1" in r.getMessage() for r in caplog.records), caplog.text
    assert len(list(tmp_path.glob("*.series"))) == 1
