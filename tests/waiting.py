"""Deadline polling for tests: wait for a condition instead of sleeping for a guessed time."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL_S = 0.01
"""How often `stays_true` and `holds_for` look: a condition that stops holding for a moment is caught."""
FIRST_PAUSE_S = 0.01
LONGEST_PAUSE_S = 0.1
PAUSE_GROWTH = 1.5
"""`wait_until` and `await_until` without an interval look again after `FIRST_PAUSE_S`, each pause half as
long again as the one before, up to `LONGEST_PAUSE_S`: an event that comes at once is seen at once, and a long
wait asks its engine, etcd or API server ten times a second, not a hundred (docs/testing.md)."""


def pauses(interval: float | None) -> Iterator[float]:
    """The pauses between a wait's looks: ``interval`` every time, or growing (`PAUSE_GROWTH`) where None."""
    if interval is not None:
        return itertools.repeat(interval)
    growing = (FIRST_PAUSE_S * PAUSE_GROWTH**n for n in itertools.count())
    return (min(pause, LONGEST_PAUSE_S) for pause in growing)


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float | None = None,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail after ``timeout`` s. Between
    polls: ``interval``, or pauses growing from `FIRST_PAUSE_S` to `LONGEST_PAUSE_S` where None.

    ``message`` (or a callable that builds it, evaluated only on failure) says what was awaited.
    """
    deadline = time.monotonic() + timeout
    between = pauses(interval)
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {text}")
        time.sleep(next(between))


def stays_true(
    predicate: Callable[[], object],
    duration: float,
    interval: float = DEFAULT_INTERVAL_S,
    message: str = "condition",
) -> None:
    """Check that ``predicate`` holds on every poll for ``duration`` s: for asserting that nothing happens."""
    deadline = time.monotonic() + duration
    while True:
        if not predicate():
            raise AssertionError(f"{message} stopped holding before {duration:g}s had passed")
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


async def await_until(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = 10.0,
    interval: float | None = None,
    message: str | Callable[[], str] = "condition",
) -> T:
    """:func:`wait_until` for asyncio tests: polls an async predicate without blocking the event loop."""
    deadline = time.monotonic() + timeout
    between = pauses(interval)
    while True:
        result = await predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {text}")
        await asyncio.sleep(next(between))


async def holds_for(
    predicate: Callable[[], object],
    duration: float,
    interval: float = DEFAULT_INTERVAL_S,
    message: str = "condition",
) -> None:
    """:func:`stays_true` for asyncio tests: other tasks run while the condition is checked."""
    deadline = time.monotonic() + duration
    while True:
        if not predicate():
            raise AssertionError(f"{message} stopped holding before {duration:g}s had passed")
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(interval)
