"""Backoff and retry_async on a fake clock: zero wall time."""

from __future__ import annotations

import asyncio
import random

import pytest

from controller_sidecar.errors import PermanentError, TransientError
from controller_sidecar.fence import LeaseLapsedError
from controller_sidecar.retry import Backoff, retry_async, retry_sync
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


class LapsedThenDown:
    """A write held back by a lapsed lease ``lapsed`` times, then failing ``down`` times at the service, then "ok"."""

    def __init__(self, lapsed: int, down: int) -> None:
        self.lapsed, self.down, self.calls = lapsed, down, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.lapsed:
            raise LeaseLapsedError("put s3://results/a: waiting, the sidecar's lease may have expired")
        if self.calls <= self.lapsed + self.down:
            raise TransientError("the store answered 503")
        return "ok"


def test_a_lapsed_lease_spends_none_of_a_transfers_attempts() -> None:
    """A learner that ends while its sidecar waits for its lease again stores its results: the waits for the lease
    are not the store's failures (the suite saw 8 attempts spent in a second, on a loaded machine)."""
    clock = FakeClock()
    operation = LapsedThenDown(lapsed=20, down=3)

    async def call() -> str:
        return operation()

    assert asyncio.run(retry_async(call, Backoff(max_attempts=4), what="upload", clock=clock)) == "ok"
    assert operation.calls == 24
    sync = LapsedThenDown(lapsed=20, down=3)
    assert retry_sync(sync, Backoff(max_attempts=4), what="upload", sleep=lambda _s: None) == "ok"
    assert sync.calls == 24


def test_the_service_failures_after_a_lapse_still_run_out() -> None:
    operation = LapsedThenDown(lapsed=5, down=100)
    with pytest.raises(TransientError, match="503"):
        retry_sync(operation, Backoff(max_attempts=4), what="upload", sleep=lambda _s: None)
    assert operation.calls == 5 + 4


def test_a_lapsed_lease_is_waited_for_no_longer_than_the_deadline() -> None:
    clock = FakeClock()
    started = clock.monotonic()
    operation = LapsedThenDown(lapsed=10_000, down=0)

    async def call() -> str:
        return operation()

    with pytest.raises(LeaseLapsedError):
        asyncio.run(retry_async(call, Backoff(initial_s=0.5, maximum_s=0.5, deadline_s=10.0), what="op", clock=clock))
    assert clock.monotonic() - started <= 10.0 and operation.calls > 8


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


OUTAGE_ATTEMPTS = 100_000
"""Days of an outage at the maximum delay: far past where the exponential overflows a float (~1,024)."""


@pytest.mark.timeout(60)
def test_an_outage_of_100000_attempts_retries_with_capped_delays_and_logs_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    operation = Failing(OUTAGE_ATTEMPTS, TransientError("etcd unavailable"))
    backoff = Backoff(initial_s=0.2, maximum_s=5.0, max_attempts=None)

    with caplog.at_level("DEBUG", logger="controller_sidecar.retry"):
        result = asyncio.run(retry_async(operation, backoff, what="status #3", clock=clock, rng=random.Random(3)))

    assert result == "ok"
    assert operation.calls == OUTAGE_ATTEMPTS + 1
    assert len(clock.sleeps) == OUTAGE_ATTEMPTS
    assert max(clock.sleeps) <= 5.0
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages[:5]
    assert messages[0] == "status #3 failed (etcd unavailable); retrying with backoff until it succeeds"
    outage_s = sum(clock.sleeps)
    assert messages[1] == f"status #3 succeeded again after {outage_s:.1f}s and {OUTAGE_ATTEMPTS} failed attempts"


@pytest.mark.timeout(60)
def test_retry_sync_survives_100000_attempts(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds

    calls = 0

    def operation() -> str:
        nonlocal calls
        calls += 1
        if calls <= OUTAGE_ATTEMPTS:
            raise TransientError("503 Slow Down")
        return "ok"

    backoff = Backoff(initial_s=0.2, maximum_s=10.0, max_attempts=None)
    with caplog.at_level("DEBUG", logger="controller_sidecar.retry"):
        assert retry_sync(operation, backoff, what="put x", sleep=sleep, monotonic=clock.monotonic) == "ok"

    assert max(sleeps) <= 10.0
    assert len(caplog.records) == 2


@pytest.mark.parametrize("attempt", [1_025, 10**6, 10**18])
def test_the_delay_of_any_attempt_is_bounded_by_the_maximum(attempt: int) -> None:
    backoff = Backoff(initial_s=0.2, maximum_s=5.0, multiplier=3.0, max_attempts=None)
    assert backoff.cap(attempt) == 5.0
    assert 0.0 <= backoff.delay(attempt, random.Random(1)) <= 5.0


@pytest.mark.parametrize(
    ("initial_s", "maximum_s", "multiplier"),
    [(-1.0, 5.0, 2.0), (6.0, 5.0, 2.0), (0.1, float("inf"), 2.0), (0.1, 5.0, 0.5), (0.1, 5.0, float("nan"))],
)
def test_a_backoff_that_cannot_be_bounded_is_refused(initial_s: float, maximum_s: float, multiplier: float) -> None:
    with pytest.raises(ValueError, match="Backoff"):
        Backoff(initial_s=initial_s, maximum_s=maximum_s, multiplier=multiplier)


class Alternating:
    """Held back ``lapsed`` times, then one attempt sent that the service refuses, again and again."""

    def __init__(self, lapsed: int) -> None:
        self.lapsed, self.calls = lapsed, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls % (self.lapsed + 1):
            raise LeaseLapsedError("put s3://results/a: waiting, the sidecar's lease may have expired")
        raise TransientError("the store answered 503")


def test_a_write_held_back_too_long_in_a_row_is_given_up_whatever_its_other_bounds() -> None:
    """The sidecar gives its outputs' writes up after ``held_back_s`` of a lapsed lease, and exits so that the
    scheduler requeues the job, rather than wait on until the scheduler fails it for a lease not renewed."""
    clock = FakeClock()
    started = clock.monotonic()
    operation = LapsedThenDown(lapsed=10_000, down=0)

    async def call() -> str:
        return operation()

    backoff = Backoff(initial_s=0.5, maximum_s=0.5, max_attempts=None, held_back_s=30.0)
    with pytest.raises(LeaseLapsedError):
        asyncio.run(retry_async(call, backoff, what="upload", clock=clock))
    assert 29.0 <= clock.monotonic() - started <= 30.0 and operation.calls > 58
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    sync = LapsedThenDown(lapsed=10_000, down=0)
    with pytest.raises(LeaseLapsedError):
        retry_sync(sync, backoff, what="upload", sleep=sleep, monotonic=lambda: now[0])
    assert 29.0 <= now[0] <= 30.0


def test_an_attempt_sent_between_lapses_starts_the_held_back_time_again() -> None:
    """Short lapses with writes sent between them (the store failing those) are not one long lapse: the service's
    failures run the attempts out, not the held-back bound."""
    operation = Alternating(lapsed=10)
    backoff = Backoff(initial_s=1.0, maximum_s=1.0, max_attempts=5, held_back_s=12.0)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(TransientError, match="503"):
        retry_sync(operation, backoff, what="upload", sleep=sleep, monotonic=lambda: now[0], rng=random.Random(1))
    assert operation.calls == 5 * 11, "five attempts sent, each after ten lapsed ones"


def test_a_held_back_bound_of_zero_hands_the_wait_to_the_caller_at_once() -> None:
    operation = LapsedThenDown(lapsed=1, down=0)
    with pytest.raises(LeaseLapsedError):
        retry_sync(operation, Backoff(held_back_s=0.0), what="upload", sleep=lambda _s: pytest.fail("waited"))
    assert operation.calls == 1
