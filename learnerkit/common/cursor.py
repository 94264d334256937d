"""The opaque ``next`` token of keyset paging (the jobs list's, the console's sweeps and trials): the last row's key
and a tag naming what it pages (a query's digest, a list's name), as URL-safe base64 of JSON. A page is the rows
after that key, never an offset; the tag lets a token handed to another list be refused rather than misread."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def encode(key: Sequence[Any], tag: str) -> str:
    raw = json.dumps({"k": list(key), "q": tag}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: str) -> tuple[Any, object]:
    """The token's key and tag, as the token holds them (the caller checks their shapes); `ValueError` for a text
    that is not a token."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        key, tag = raw["k"], raw["q"]
    except (binascii.Error, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{token[:40]!r} is not a next token") from e
    return key, tag


@dataclass(frozen=True)
class Slice(Generic[T]):
    """One page of a list held whole (`page`)."""

    rows: Sequence[T]
    start: int
    """The index of the page's first row in the list."""
    cursors: tuple[str, ...]
    """The token that continues after each row (a page cut short, at a byte bound, goes on from one)."""
    next: str | None
    """The token of the next page; None on the last."""


def page(rows: Sequence[T], key: Callable[[T], Sequence[Any]], limit: int, token: str | None, tag: str) -> Slice[T]:
    """The ``limit`` rows of ``rows`` (in the order shown, ``key`` rising along it, unique) after ``token``'s key;
    `ValueError` for a token that is none, names another list than ``tag``, or holds a key of another shape."""
    start = 0
    if token:
        after, found = decode(token)
        if found != tag:
            raise ValueError(f"{token[:40]!r} is a next token of another list")
        try:
            start = next((i for i, row in enumerate(rows) if list(key(row)) > after), len(rows))
        except TypeError as e:
            raise ValueError(f"{token[:40]!r} holds a key of another list") from e
    chosen = rows[start : start + limit]
    cursors = tuple(encode(key(row), tag) for row in chosen)
    return Slice(chosen, start, cursors, cursors[-1] if start + limit < len(rows) else None)
