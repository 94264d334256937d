"""The sidecar's counters of log parts shipped and status updates queued count what the runtime does (issue 27:
both were declared and never incremented)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from controller_sidecar.status import Phase, StatusRecord
from controller_sidecar.statusqueue import StatusReporter
from tests.unit.controller_sidecar.test_await_exit import sidecar, v2_cgroup

pytestmark = pytest.mark.timeout(20)


class Parts:
    """The S3 store's put_bytes, keeping what it was given."""

    def __init__(self) -> None:
        self.put: list[str] = []

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self.put.append(key)


def sample(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(f"learnerkit_sidecar_{name} "))
    return float(line.split()[1])


def test_each_log_part_shipped_and_each_status_queued_is_counted(tmp_path: Path) -> None:
    side = sidecar(tmp_path, v2_cgroup(tmp_path / "cgroup", populated=True))
    parts = Parts()
    delivered: list[StatusRecord] = []

    async def deliver(record: StatusRecord) -> None:
        delivered.append(record)

    async def scenario() -> None:
        side._store = asyncio.get_running_loop().create_future()
        side._store.set_result(parts)  # type: ignore[arg-type]
        await side._log_sink("learner.log.part-000001", b"one\n")
        await side._log_sink("learner.log.part-000002", b"two\n")
        reporter = StatusReporter(deliver, learner_id=1, state_dir=side.settings.dirs.control)
        await reporter.start()
        side._report(reporter, Phase.PENDING)
        side._report(reporter, Phase.PENDING)  # reported once: not queued again
        side._report(reporter, Phase.DOWNLOADING)
        assert await reporter.flush(5)
        await reporter.aclose()

    asyncio.run(scenario())
    text = side.metrics.render().decode()
    assert len(parts.put) == sample(text, "log_parts_shipped_total") == 2
    assert sample(text, "log_bytes_shipped_total") == 8
    assert len(delivered) == sample(text, "status_updates_queued_total") == 2
