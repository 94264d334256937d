"""StatusReporter on a fake clock: order, retries, drops, persistence across a restart, flush timeout."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar.errors import PermanentError, TransientError
from controller_sidecar.status import ErrorCode, Phase, StatusRecord
from controller_sidecar.statusqueue import STATE_FILE, StatusReporter
from tests.fakeclock import FakeClock

pytestmark = pytest.mark.timeout(5)


class Sink:
    """A delivery target that fails as told (per sequence) and records what it received, in order."""

    def __init__(self) -> None:
        self.received: list[StatusRecord] = []
        self.transient_failures: dict[int, int] = {}
        self.permanent: set[int] = set()
        self.down = False

    async def __call__(self, record: StatusRecord) -> None:
        await asyncio.sleep(0)
        if self.down:
            raise TransientError("etcd is down")
        if self.transient_failures.get(record.sequence, 0) > 0:
            self.transient_failures[record.sequence] -= 1
            raise TransientError("etcd is down")
        if record.sequence in self.permanent:
            raise PermanentError("permission denied")
        self.received.append(record)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_records_are_delivered_in_order_with_retries(tmp_path: Path) -> None:
    sink = Sink()
    sink.transient_failures = {2: 3, 3: 1}
    clock = FakeClock()
    reporter = StatusReporter(sink, learner_id=1, state_dir=tmp_path, clock=clock)

    async def scenario() -> None:
        await reporter.start()
        for phase in (Phase.PENDING, Phase.DOWNLOADING, Phase.PROCESSING, Phase.STORING):
            reporter.report(phase)
        reporter.report(Phase.FAILED, error_code=ErrorCode.LEARNER_FAILED, message="exit 3", exit_code=3)
        assert await reporter.flush(timeout_s=60)
        await reporter.aclose()

    run(scenario)

    assert [r.sequence for r in sink.received] == [1, 2, 3, 4, 5]
    assert [r.phase for r in sink.received][-1] is Phase.FAILED
    assert sink.received[-1].exit_code == 3
    assert sink.received[-1].error_code is ErrorCode.LEARNER_FAILED
    assert (reporter.delivered, reporter.retries, reporter.dropped) == (5, 4, 0)
    assert reporter.last == sink.received[-1]
    assert reporter.pending == ()


def test_a_permanent_error_drops_the_record_and_delivery_goes_on(tmp_path: Path) -> None:
    sink = Sink()
    sink.permanent = {2}
    reporter = StatusReporter(sink, learner_id=2, state_dir=tmp_path, clock=FakeClock())

    async def scenario() -> None:
        await reporter.start()
        for phase in (Phase.PENDING, Phase.DOWNLOADING, Phase.PROCESSING):
            reporter.report(phase)
        assert await reporter.flush(timeout_s=10)
        await reporter.aclose()

    run(scenario)

    assert [r.sequence for r in sink.received] == [1, 3]
    assert (reporter.delivered, reporter.dropped) == (2, 1)


def test_timestamps_come_from_the_clock(tmp_path: Path) -> None:
    clock = FakeClock(wall_start=1_767_225_600.0)
    reporter = StatusReporter(Sink(), learner_id=1, state_dir=tmp_path, clock=clock)

    async def scenario() -> None:
        await reporter.start()
        record = reporter.report(Phase.PENDING)
        assert record.timestamp.timestamp() == 1_767_225_600.0
        assert record.to_raw()["timestamp"] == "2026-01-01T00:00:00Z"
        await reporter.aclose()

    run(scenario)


def test_pending_records_and_numbering_survive_a_restart(tmp_path: Path) -> None:
    down = Sink()
    down.down = True
    first = StatusReporter(down, learner_id=1, state_dir=tmp_path, clock=FakeClock())

    async def before_restart() -> None:
        await first.start()
        first.report(Phase.PENDING)
        first.report(Phase.DOWNLOADING)
        first.report(Phase.PROCESSING)
        assert not await first.flush(timeout_s=1)
        await first.aclose()

    run(before_restart)
    persisted = json.loads((tmp_path / STATE_FILE).read_text())
    assert [raw["sequence"] for raw in persisted["pending"]] == [1, 2, 3]
    assert persisted["next_sequence"] == 4
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]

    up = Sink()
    second = StatusReporter(up, learner_id=1, state_dir=tmp_path, clock=FakeClock())

    async def after_restart() -> None:
        await second.start()
        assert second.last is not None and second.last.sequence == 3
        record = second.report(Phase.COMPLETED)
        assert record.sequence == 4
        assert await second.flush(timeout_s=10)
        await second.aclose()

    run(after_restart)
    assert [(r.sequence, r.phase) for r in up.received] == [
        (1, Phase.PENDING),
        (2, Phase.DOWNLOADING),
        (3, Phase.PROCESSING),
        (4, Phase.COMPLETED),
    ]
    persisted = json.loads((tmp_path / STATE_FILE).read_text())
    assert persisted["pending"] == []
    assert persisted["next_sequence"] == 5


def test_flush_gives_up_at_its_timeout_and_keeps_retrying(tmp_path: Path) -> None:
    sink = Sink()
    sink.down = True
    clock = FakeClock()
    reporter = StatusReporter(sink, learner_id=1, state_dir=tmp_path, clock=clock)

    async def scenario() -> None:
        await reporter.start()
        reporter.report(Phase.COMPLETED)
        started = clock.monotonic()
        assert not await reporter.flush(timeout_s=2.5)
        assert clock.monotonic() - started >= 2.5
        assert reporter.retries > 0
        sink.down = False
        assert await reporter.flush(timeout_s=30)
        await reporter.aclose()

    run(scenario)
    assert [r.phase for r in sink.received] == [Phase.COMPLETED]


def test_flush_with_nothing_queued_returns_at_once(tmp_path: Path) -> None:
    clock = FakeClock()
    reporter = StatusReporter(Sink(), learner_id=1, state_dir=tmp_path, clock=clock)

    async def scenario() -> None:
        await reporter.start()
        assert await reporter.flush(timeout_s=0)
        await reporter.aclose()

    run(scenario)
    assert clock.sleeps == []


def test_report_before_start_is_refused(tmp_path: Path) -> None:
    reporter = StatusReporter(Sink(), learner_id=1, state_dir=tmp_path)
    with pytest.raises(RuntimeError, match="before start"):
        reporter.report(Phase.PENDING)
