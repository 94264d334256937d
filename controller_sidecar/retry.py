"""Exponential backoff with full jitter, for every etcd and S3 client: the sidecar's loops and the host's
commands (:data:`HOST_CALLS`). Retries only TransientError.

Unbounded retries may run for days (an etcd or S3 outage), so the arithmetic is bounded: the exponential is
never computed past the point where it reaches ``maximum_s``. An outage is logged once when it begins and
once, with its duration and attempts, when it ends (:class:`Outage`), never once per attempt.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import HeldBackError, TransientError

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
    """Give up after this many failed attempts (None: retry until the deadline or cancellation); a
    :class:`~controller_sidecar.errors.HeldBackError` (the sidecar's own lease lapsed) spends none."""
    deadline_s: float | None = None
    """Give up once this many seconds have passed since the first attempt."""
    held_back_s: float | None = None
    """Give up once the sidecar has held the operation back this long in a row (its lease may have lapsed: a
    :class:`~controller_sidecar.errors.HeldBackError` since the last attempt that was sent); None: wait for the
    lease as long as the other bounds allow."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.initial_s <= self.maximum_s or not math.isfinite(self.maximum_s):
            raise ValueError(f"Backoff: need 0 <= initial_s <= maximum_s < inf, got {self.initial_s}, {self.maximum_s}")
        if not 1.0 <= self.multiplier < math.inf:
            raise ValueError(f"Backoff: multiplier must be a finite number >= 1, got {self.multiplier}")

    def cap(self, attempt: int) -> float:
        """The upper bound of the wait after failed attempt ``attempt`` (1-based), for any attempt count."""
        steps = max(0, attempt - 1)
        if steps == 0 or self.initial_s == 0.0 or self.multiplier == 1.0:
            return self.initial_s
        # Past this many steps initial * multiplier**steps exceeds the maximum: never raise it that far.
        if steps * math.log(self.multiplier) >= math.log(self.maximum_s / self.initial_s):
            return self.maximum_s
        return min(self.maximum_s, self.initial_s * self.multiplier**steps)

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait after failed attempt number ``attempt`` (1-based): uniform in [0, cap] (full jitter)."""
        return rng.uniform(0.0, self.cap(attempt))


HOST_CALLS = Backoff(initial_s=0.2, maximum_s=2.0, max_attempts=None, deadline_s=30.0)
"""The host's etcd and S3 calls (``sidecar run-local`` and ``halt``, ``dev upload``, the scheduler's log
reads): an etcd restarting or a store answering 503 is waited out for up to 30 s, then reported."""


class Outage:
    """The log of one operation's failures: a warning when they begin, one line with the duration and the
    number of failed attempts when the operation succeeds again; nothing per attempt."""

    def __init__(self, what: str, monotonic: Callable[[], float]) -> None:
        self.what = what
        self._monotonic = monotonic
        self.started: float | None = None
        self.failures = 0

    def failed(self, error: Exception) -> None:
        self.failures += 1
        if self.started is None:
            self.started = self._monotonic()
            LOGGER.warning("%s failed (%s); retrying with backoff until it succeeds", self.what, error)

    def ended(self) -> None:
        """The operation succeeded: log the outage's end, if there was one."""
        if self.started is not None:
            LOGGER.warning(
                "%s succeeded again after %.1fs and %d failed attempts",
                self.what,
                self._monotonic() - self.started,
                self.failures,
            )
        self.started, self.failures = None, 0


class HeldFor:
    """How long one operation has been held back in a row, against its backoff's ``held_back_s``."""

    def __init__(self, backoff: Backoff) -> None:
        self._limit_s = backoff.held_back_s
        self._since: float | None = None

    def too_long(self, error: TransientError, now: float, delay: float) -> bool:
        """Whether, after ``error`` at ``now``, waiting ``delay`` more would hold the operation back too long."""
        if not isinstance(error, HeldBackError):
            self._since = None  # the attempt was sent: the lease was known held
            return False
        if self._since is None:
            self._since = now
        return self._limit_s is not None and now - self._since + delay >= self._limit_s


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
    outage = Outage(what, clock.monotonic)
    attempt, tries = 0, 0
    held = HeldFor(backoff)
    while True:
        tries += 1
        try:
            result = await operation()
        except TransientError as error:
            attempt += 0 if isinstance(error, HeldBackError) else 1
            delay = max(backoff.delay(tries, rng), error.delay_s or 0.0)
            out_of_attempts = backoff.max_attempts is not None and attempt >= backoff.max_attempts
            past_deadline = backoff.deadline_s is not None and clock.monotonic() - started + delay > backoff.deadline_s
            if out_of_attempts or past_deadline or held.too_long(error, clock.monotonic(), delay):
                raise
            outage.failed(error)
            if on_retry is not None:
                on_retry(tries, error)
            await clock.sleep(delay)
        else:
            outage.ended()
            return result


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
    outage = Outage(what, monotonic)
    attempt, tries = 0, 0
    held = HeldFor(backoff)
    while True:
        tries += 1
        try:
            result = operation()
        except TransientError as error:
            attempt += 0 if isinstance(error, HeldBackError) else 1
            delay = max(backoff.delay(tries, rng), error.delay_s or 0.0)
            out_of_attempts = backoff.max_attempts is not None and attempt >= backoff.max_attempts
            past_deadline = backoff.deadline_s is not None and monotonic() - started + delay > backoff.deadline_s
            if out_of_attempts or past_deadline or held.too_long(error, monotonic(), delay):
                raise
            outage.failed(error)
            if on_retry is not None:
                on_retry(tries, error)
            sleep(delay)
        else:
            outage.ended()
            return result
