"""A job's provenance writes run one after another: an evaluation round's statement is written after the job's own
documents, whose factsheet it lists itself in, however long those take."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

from learnerkit.scheduler.core.provenancing import Provenancing


def test_a_jobs_writes_run_in_order_and_one_at_a_time() -> None:
    shared: Any = SimpleNamespace(options=SimpleNamespace(instance="lk-test"))
    provenancing = Provenancing(shared)
    release = threading.Event()
    done: list[str] = []

    def job_documents() -> None:
        assert release.wait(timeout=30)
        done.append("job")

    async def scenario() -> None:
        provenancing._queue("job-1", job_documents, "its provenance")
        provenancing._queue("job-1", lambda: done.append("round 1"), "round 1")
        provenancing._queue("job-2", lambda: done.append("other job"), "its provenance")
        await asyncio.wait_for(provenancing._writes["job-2"], timeout=30)  # another job's write does not wait
        assert done == ["other job"] and provenancing.writing("job-1")
        release.set()
        await provenancing.drain()

    asyncio.run(scenario())
    assert done == ["other job", "job", "round 1"]
    assert not provenancing.writing("job-1")


def test_a_round_is_recorded_signed_only_once_its_statement_is_stored() -> None:
    shared: Any = SimpleNamespace(options=SimpleNamespace(instance="lk-test"))
    provenancing = Provenancing(shared)
    signed: list[str] = []

    def refused() -> None:
        raise OSError("the results store refused the write")

    async def recorded(what: str) -> None:
        signed.append(what)

    async def scenario() -> None:
        provenancing._queue("job-1", refused, "round 1", then=lambda: recorded("round 1"))
        provenancing._queue("job-1", lambda: None, "round 2", then=lambda: recorded("round 2"))
        await provenancing.drain()

    asyncio.run(scenario())
    assert signed == ["round 2"], "a statement not stored leaves its round to the next start"
