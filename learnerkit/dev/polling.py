"""Deadline polling: wait for a condition with a bound, never for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Call ``predicate`` until it is true (True) or ``timeout`` seconds have passed (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
