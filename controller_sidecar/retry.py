"""Exponential backoff with full jitter, for every etcd and S3 client: the sidecar's loops and the host's
commands (:data:`HOST_CALLS`). Retries only TransientError."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import TransientError

LOGGER = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 0.1
    """The first delay's upper bound."""
    maximum_s: float = 5.0
    """No delay is longer than this."""
    multiplier: float = 2.0
    max_attempts: int | None = 8
    """Give up after this many attempts (None: retry until the deadline or cancellation)."""
    deadline_s: float | None = None
    """Give up once this many seconds have passed since the first attempt."""

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait after failed attempt number ``attempt`` (1-based): uniform in [0, cap] (full jitter)."""
        cap = min(self.maximum_s, self.initial_s * self.multiplier ** (attempt - 1))
        return rng.uniform(0.0, cap)


HOST_CALLS = Backoff(initial_s=0.2, maximum_s=2.0, max_attempts=None, deadline_s=30.0)
"""The host's etcd and S3 calls (``sidecar run-local`` and ``halt``, ``dev upload``, the scheduler's log
reads): an etcd restarting or a store answering 503 is waited out for up to 30 s, then reported."""


async def retry_async(
    operation: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    what: str,
    clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
    on_retry: Callable[[int, TransientError], None] | None = None,
) -> T:
    """Run ``operation`` until it succeeds, retrying :class:`TransientError` with backoff.

    Anything else propagates at once. When the attempts or the deadline run out, the last
    TransientError propagates. ``on_retry(attempt, error)`` is called before each wait (for counters).
    """
    rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
    started = clock.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await operation()
        except TransientError as error:
            delay = max(backoff.delay(attempt, rng), error.delay_s or 0.0)
            out_of_attempts = backoff.max_attempts is not None and attempt >= backoff.max_attempts
            past_deadline = backoff.deadline_s is not None and clock.monotonic() - started + delay > backoff.deadline_s
            if out_of_attempts or past_deadline:
                raise
            LOGGER.debug("%s: attempt %d failed (%s); retrying in %.2fs", what, attempt, error, delay)
            if on_retry is not None:
                on_retry(attempt, error)
            await clock.sleep(delay)


def retry_sync(
    operation: Callable[[], T],
    backoff: Backoff,
    *,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
    on_retry: Callable[[int, TransientError], None] | None = None,
) -> T:
    """:func:`retry_async` for blocking code (transfers in worker threads); ``sleep`` and ``monotonic``
    are parameters so that tests run it in zero wall time."""
    rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
    started = monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return operation()
        except TransientError as error:
            delay = max(backoff.delay(attempt, rng), error.delay_s or 0.0)
            out_of_attempts = backoff.max_attempts is not None and attempt >= backoff.max_attempts
            past_deadline = backoff.deadline_s is not None and monotonic() - started + delay > backoff.deadline_s
            if out_of_attempts or past_deadline:
                raise
            LOGGER.debug("%s: attempt %d failed (%s); retrying in %.2fs", what, attempt, error, delay)
            if on_retry is not None:
                on_retry(attempt, error)
            sleep(delay)
