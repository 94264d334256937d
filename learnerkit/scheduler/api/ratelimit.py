"""Token buckets per key (a tenant, a token id, a client address), in memory, with the clock passed in.

A key may spend ``burst`` at once and earns ``per_minute`` back over each minute. A bucket that has filled up
again is forgotten, and at most ``max_keys`` buckets are kept (the fullest go first), so a flood of new keys
costs bounded memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    def __init__(self, per_minute: float, burst: int, *, clock: Clock = time.monotonic, max_keys: int = 10_000) -> None:
        if per_minute <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs per_minute > 0 and burst >= 1; got {per_minute}, {burst}")
        self.rate_s = per_minute / 60.0
        self.burst = burst
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Spend one token if there is one: 0.0; else the seconds until there is, spending nothing."""
        with self._lock:
            wait = self._wait(key)
            if wait == 0.0:
                self._spend(key)
            return wait

    def refund(self, key: str) -> None:
        """Give back one token ``take`` reserved for an attempt that turned out not to count."""
        with self._lock:
            bucket = self._refilled(key)
            if bucket is not None:
                bucket.tokens += 1
                if bucket.tokens >= self.burst:
                    del self._buckets[key]

    def _wait(self, key: str) -> float:
        bucket = self._refilled(key)
        return 0.0 if bucket is None or bucket.tokens >= 1 else (1 - bucket.tokens) / self.rate_s

    def _spend(self, key: str) -> None:
        bucket = self._refilled(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                self._forget_fullest()
            bucket = self._buckets[key] = _Bucket(float(self.burst), self.clock())
        bucket.tokens -= 1

    def _refilled(self, key: str) -> _Bucket | None:
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        now = self.clock()
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate_s)
        bucket.at = now
        if bucket.tokens >= self.burst:
            del self._buckets[key]
            return None
        return bucket

    def _forget_fullest(self) -> None:
        for key in list(self._buckets):
            self._refilled(key)
        if len(self._buckets) >= self.max_keys:
            del self._buckets[max(self._buckets, key=lambda k: self._buckets[k].tokens)]
