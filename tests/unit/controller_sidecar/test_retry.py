"""Backoff and retry_async on a fake clock: zero wall time."""

from __future__ import annotations

import asyncio
import random

import pytest

from controller_sidecar.errors import PermanentError, TransientError
from controller_sidecar.retry import Backoff, retry_async
from tests.fakeclock import FakeClock

pytestmark = pytest.mark.timeout(5)


class Failing:
    """An operation that fails ``times`` times with ``error``, then returns "ok"."""

    def __init__(self, times: int, error: Exception) -> None:
        self.times = times
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return "ok"


def test_delay_is_capped_by_the_exponential_and_the_maximum() -> None:
    backoff = Backoff(initial_s=0.1, maximum_s=2.0, multiplier=2.0)
    rng = random.Random(7)
    for attempt in range(1, 20):
        cap = min(2.0, 0.1 * 2.0 ** (attempt - 1))
        delays = [backoff.delay(attempt, rng) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in delays)
    assert max(backoff.delay(30, rng) for _ in range(200)) <= 2.0


def test_jitter_spreads_over_the_whole_range() -> None:
    backoff = Backoff(initial_s=1.0, maximum_s=1.0)
    rng = random.Random(1)
    delays = [backoff.delay(1, rng) for _ in range(1000)]
    assert min(delays) < 0.1
    assert max(delays) > 0.9
    assert len(set(delays)) > 900


def test_transient_errors_are_retried_until_success() -> None:
    clock = FakeClock()
    operation = Failing(3, TransientError("etcd unavailable"))
    retried: list[int] = []

    result = asyncio.run(
        retry_async(
            operation,
            Backoff(max_attempts=5),
            what="op",
            clock=clock,
            on_retry=lambda attempt, _: retried.append(attempt),
        )
    )

    assert result == "ok"
    assert operation.calls == 4
    assert retried == [1, 2, 3]
    assert len(clock.sleeps) == 3


def test_the_last_transient_error_propagates_after_max_attempts() -> None:
    operation = Failing(100, TransientError("down"))
    with pytest.raises(TransientError, match="down"):
        asyncio.run(retry_async(operation, Backoff(max_attempts=4), what="op", clock=FakeClock()))
    assert operation.calls == 4


@pytest.mark.parametrize("error", [PermanentError("denied"), ValueError("bug")])
def test_only_transient_errors_are_retried(error: Exception) -> None:
    clock = FakeClock()
    operation = Failing(1, error)
    with pytest.raises(type(error)):
        asyncio.run(retry_async(operation, Backoff(), what="op", clock=clock))
    assert operation.calls == 1
    assert clock.sleeps == []


def test_the_deadline_stops_retrying_before_it_is_passed() -> None:
    clock = FakeClock()
    started = clock.monotonic()
    operation = Failing(10_000, TransientError("down"))
    with pytest.raises(TransientError):
        asyncio.run(
            retry_async(
                operation,
                Backoff(initial_s=0.5, maximum_s=0.5, max_attempts=None, deadline_s=10.0),
                what="op",
                clock=clock,
            )
        )
    assert clock.monotonic() - started <= 10.0
    assert operation.calls > 2


def test_retry_after_is_a_minimum_delay() -> None:
    clock = FakeClock()
    operation = Failing(3, TransientError("slow down", delay_s=3.0))
    asyncio.run(retry_async(operation, Backoff(initial_s=0.01, maximum_s=0.01), what="op", clock=clock))
    assert clock.sleeps == [3.0, 3.0, 3.0]
