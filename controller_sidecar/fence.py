"""A sidecar's right to write for its attempt: its lease, known held by its own clock, and the job's fence.

The scheduler starts another attempt of a job only once the old attempt's leases are gone from etcd (or its node is
deleted), and writes the new attempt's number in the job's ``fence`` key first (docs/security.md, "Fencing"). The
sidecar's side of that bargain, kept here:

- **suspended** from the moment its lease may have expired, by its own monotonic clock: :data:`HELD_FRACTION` of
  the TTL after it *sent* its last refresh that etcd answered (etcd restarts the TTL when it receives the refresh,
  later). While suspended, every write to the store is refused as transient (the uploads retry); a refresh that
  succeeds again lifts it: etcd being away for a while is a blip, not a loss.
- **fenced** for good once etcd says the job's fence names another attempt (on a refresh, or as the refused
  compare of a write): the sidecar halts its learner and stores nothing more.

The checks run on the store's worker threads as well as the event loop: they read a float and a flag.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import HeldBackError, PermanentError

LOGGER = logging.getLogger(__name__)
HELD_FRACTION = 2 / 3
"""Of the lease's TTL after a refresh's sending: its writes stop before etcd can expire the lease while the
sidecar's clock runs no more than a third slower than etcd's, and a write already sent has the rest to land."""


class FencedError(PermanentError):
    """The job's fence names another attempt: this sidecar's writes are refused for good."""


class LeaseLapsedError(HeldBackError):
    """The sidecar's lease may have expired (etcd unanswered past its refresh deadline): writes wait."""


class Fence:
    def __init__(
        self,
        attempt: int | None,
        ttl_s: float,
        on_lost: Callable[[], None] = lambda: None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.attempt = attempt
        """This sidecar's attempt; None where it has none (``sidecar run-local``): then nothing is fenced."""
        self.ttl_s = ttl_s
        self._clock = clock
        self._held_until: float | None = None
        self._fenced = threading.Event()
        self._on_lost = on_lost
        """Called once, on the event loop, as the fence is lost."""
        self.reason = ""

    @property
    def guarded(self) -> bool:
        return self.attempt is not None

    @property
    def fenced(self) -> bool:
        return self._fenced.is_set()

    @property
    def held_back(self) -> bool:
        """Whether this sidecar's writes wait now because its lease may have lapsed (not fenced: that is for good)."""
        if not self.guarded or self.fenced:
            return False
        held_until = self._held_until
        return held_until is None or self._clock.monotonic() >= held_until

    def refreshed(self, sent_at: float) -> None:
        """etcd answered a refresh sent at ``sent_at`` (monotonic): the lease is held until TTL after its receipt."""
        if not self.fenced:
            self._held_until = sent_at + self.ttl_s * HELD_FRACTION

    def lapsed(self) -> None:
        """etcd said the lease expired: suspended until a new one is granted."""
        self._held_until = None

    def lose(self, reason: str) -> None:
        if not self.fenced:
            LOGGER.error("fenced: %s; the learner is halted and nothing more is stored", reason)
            self.reason = reason
            self._held_until = None
            self._fenced.set()
            self._on_lost()

    def check(self, what: str) -> None:
        """Raise unless this sidecar may write ``what`` now: `FencedError` for good, `LeaseLapsedError` for now."""
        if self.fenced:
            raise FencedError(f"{what}: refused, this attempt is fenced ({self.reason})")
        if self.held_back:
            raise LeaseLapsedError(f"{what}: waiting, the sidecar's lease may have expired (etcd unanswered)")


UNGUARDED = Fence(None, 0.0)
"""For a store used without a lease (the tools, ``sidecar run-local``)."""
