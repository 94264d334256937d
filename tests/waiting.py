"""Deadline polling for tests: wait for a condition instead of sleeping for a guessed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL_S = 0.01


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = DEFAULT_INTERVAL_S,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail after ``timeout`` s.

    ``message`` (or a callable that builds it, evaluated only on failure) says what was awaited.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {text}")
        time.sleep(interval)


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
    interval: float = DEFAULT_INTERVAL_S,
    message: str | Callable[[], str] = "condition",
) -> T:
    """:func:`wait_until` for asyncio tests: polls an async predicate without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {text}")
        await asyncio.sleep(interval)


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
