"""Keyset paging of the lists the facade gives whole (a tenant's sweeps, a sweep's trials), with the jobs list's
query parameters and controls: ``limit`` rows a page (`PAGE_SIZES` offered, at most the API's `MAX_PAGE_JOBS`)
and ``next``, the jobs list's kind of token (`common.cursor`) naming its list and holding its last row's key. A
page is the rows after that key, never an offset, as the jobs list's pages are (docs/api.md, "Listing jobs"):
sweeps started meanwhile shift no page."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar
from urllib.parse import urlencode

from fastapi import Query

from learnerkit.common import cursor
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

    def controls(self, path: str, token: str) -> dict[str, Any]:
        """What the page's paging controls read (templates/paging.html.j2), for the list at ``path`` shown after
        ``token``: the page, the sizes offered, the First page and Next page links."""
        first, after = page_links(path, {"limit": self.limit}, token, self.next)
        return {"paged": self, "page_sizes": PAGE_SIZES, "per_page_path": path, "first_link": first, "next_link": after}


Limit = Annotated[int, Query(ge=1, le=MAX_PAGE_JOBS, description="rows a page")]
"""A list page's ``limit``, held to the bounds the API's lists keep (a bad one: the API's words, `pages`)."""


def page_links(path: str, params: Mapping[str, Any], token: str, next_token: str) -> tuple[str, str]:
    """The addresses, with the list's other query parameters, of the first page (empty when ``token`` is, on it)
    and of the next (empty when ``next_token`` is, on the last)."""
    first = f"{path}?{urlencode(params, doseq=True)}" if token else ""
    after = f"{path}?{urlencode({**params, 'next': next_token}, doseq=True)}" if next_token else ""
    return first, after


def page_of(
    rows: Sequence[T], key: Callable[[T], tuple[Any, ...]], limit: int, token: str, *, list_name: str
) -> Paged[T]:
    """The page of ``rows`` (in the order shown, ``key`` rising along it) after ``token``'s key; a 400 page naming
    ``next`` for a token that is not one of ``list_name``'s (the token names its list, as the jobs list's its
    query)."""
    try:
        chosen = cursor.page(rows, key, limit, token, list_name)
    except ValueError as e:
        raise _not_ours(token) from e
    return Paged(chosen.rows, len(rows), chosen.start + 1, limit, chosen.next or "")


def _not_ours(token: str) -> PageError:
    return PageError(
        400,
        "Bad address",
        f"next: {token[:40]!r} is not a next token of this list: open the list again from its first page (its "
        "address without next)",
    )
