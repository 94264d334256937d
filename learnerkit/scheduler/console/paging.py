"""Keyset paging of the lists the facade gives whole (a tenant's sweeps, a sweep's trials), with the jobs list's
query parameters and controls: ``limit`` rows a page (`PAGE_SIZES` offered, at most the API's `MAX_PAGE_JOBS`)
and ``next``, an opaque token naming its list and holding its last row's key. A page is the rows after that key,
never an offset, as the jobs list's pages are (docs/api.md, "Listing jobs"): sweeps started meanwhile shift no page."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

from learnerkit.scheduler.console.access import PageError
from learnerkit.scheduler.facade import MAX_PAGE_JOBS

T = TypeVar("T")
PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_LIMIT = 50


@dataclass(frozen=True)
class Paged(Generic[T]):
    rows: Sequence[T]
    total: int
    """Rows over every page."""
    first: int
    """The 1-based place of the page's first row among them."""
    limit: int
    next: str
    """The token of the next page; empty on the last."""

    def links(self, path: str, token: str) -> tuple[str, str]:
        """The addresses of the first page (empty on it) and of the next (empty on the last), as the jobs list's."""
        params = {"limit": self.limit}
        first = f"{path}?{urlencode(params)}" if token else ""
        after = f"{path}?{urlencode(params | {'next': self.next})}" if self.next else ""
        return first, after


def page_of(
    rows: Sequence[T], key: Callable[[T], tuple[Any, ...]], limit: int, token: str, *, list_name: str
) -> Paged[T]:
    """The page of ``rows`` (in the order shown, ``key`` rising along it) after ``token``'s key; a 400 page naming
    ``next`` for a token that is not one of ``list_name``'s (the token names its list, as the jobs list's its
    query)."""
    limit = min(max(limit, 1), MAX_PAGE_JOBS)
    start = 0
    if token:
        after = _decode(token, list_name)
        try:
            start = next((i for i, row in enumerate(rows) if list(key(row)) > after), len(rows))
        except TypeError as e:  # a key of another shape
            raise _not_ours(token) from e
    page = rows[start : start + limit]
    more = start + limit < len(rows)
    return Paged(page, len(rows), start + 1, limit, _encode(list_name, key(page[-1])) if more else "")


def _encode(list_name: str, key: tuple[Any, ...]) -> str:
    return base64.urlsafe_b64encode(json.dumps([list_name, *key]).encode()).decode().rstrip("=")


def _decode(token: str, list_name: str) -> list[Any]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as e:
        raise _not_ours(token) from e
    if not isinstance(raw, list) or not raw or raw[0] != list_name:
        raise _not_ours(token)
    return raw[1:]


def _not_ours(token: str) -> PageError:
    return PageError(400, "Bad address", f"next: {token[:40]!r} is not a next token of this list")
