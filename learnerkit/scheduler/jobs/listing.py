"""One page of a tenant's job list: filter, sort, and keyset paging with an opaque ``next`` token.

A page is the rows after the token's key in the query's order, never an offset: rows submitted or ended
meanwhile do not shift the pages already read, and asking for page 500 costs what page 1 costs. The token is
the last row's sort key (its sort value, submission time and job id, which make it unique) with a digest of the
query's filters and order, so a token handed to another query is refused rather than silently misread.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from learnerkit.common import cursor
from learnerkit.scheduler.errors import InvalidRequestError, not_a_next_token
from learnerkit.scheduler.facade import JobQuery
from learnerkit.scheduler.jobs.state import JobStatus

SORT_FIELDS = ("submitted", "name", "status")
STATUSES = frozenset(status.value for status in JobStatus)

SortKey = tuple[Any, float, str]


@dataclass(frozen=True)
class ListedJob:
    """What the list filters and sorts a job by (cheap to make for every job of a tenant)."""

    job_id: str
    name: str
    status: str
    framework: str
    submitted_at: float
    reason: str = ""

    def key(self, sort: str) -> SortKey:
        value: Any = self.submitted_at if sort == "submitted" else getattr(self, sort)
        return (value, self.submitted_at, self.job_id)

    def matches(self, query: JobQuery) -> bool:
        if query.statuses and self.status not in query.statuses:
            return False
        if query.name is not None and self.name != query.name:
            return False
        if query.framework is not None and self.framework != query.framework:
            return False
        if query.since is not None and self.submitted_at < query.since:
            return False
        if query.until is not None and self.submitted_at >= query.until:
            return False
        if query.search:
            needle = query.search.casefold()
            return any(needle in text.casefold() for text in (self.job_id, self.name, self.reason))
        return True


@dataclass(frozen=True)
class Selection:
    """The job ids of one page, in order, with each row's token and whether rows follow the last one."""

    job_ids: tuple[str, ...]
    cursors: tuple[str, ...]
    """The token that continues after each row (the API cuts a page short at its byte bound with these)."""
    more: bool
    total: int
    """Rows that match the filters, over every page."""


def select(jobs: Sequence[ListedJob], query: JobQuery) -> Selection:
    """The page of ``jobs`` that ``query`` asks for; `InvalidRequestError` for a token of another query."""
    if query.sort not in SORT_FIELDS:
        raise InvalidRequestError(f"sort: expected one of {', '.join(SORT_FIELDS)}; got {query.sort!r}")
    unknown = sorted(query.statuses - STATUSES)
    if unknown:
        raise InvalidRequestError(f"status: expected any of {', '.join(sorted(STATUSES))}; got {', '.join(unknown)}")
    digest = _query_digest(query)
    keys = [job.key(query.sort) for job in jobs if job.matches(query)]
    total = len(keys)
    if query.next is not None:
        after = decode_token(query.next, query, digest)
        keys = [key for key in keys if (key < after if query.descending else key > after)]
    # The page and one more row (is there a next page?), without sorting every row of the tenant.
    pick = heapq.nlargest if query.descending else heapq.nsmallest
    page = pick(query.limit + 1, keys)
    return Selection(
        job_ids=tuple(key[2] for key in page[: query.limit]),
        cursors=tuple(cursor.encode(key, digest) for key in page[: query.limit]),
        more=len(page) > query.limit,
        total=total,
    )


def _query_digest(query: JobQuery) -> str:
    shape = [
        query.sort,
        query.descending,
        sorted(query.statuses),
        query.name,
        query.framework,
        query.since,
        query.until,
        query.search,
    ]
    return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:12]


def decode_token(token: str, query: JobQuery, digest: str) -> SortKey:
    """The sort key a token continues after; refuses one that is not a token or belongs to another query."""
    try:
        key, raw_digest = cursor.decode(token)
        value, submitted, job_id = key
    except (ValueError, TypeError) as e:
        raise not_a_next_token(token) from e
    if raw_digest != digest:
        raise InvalidRequestError(
            "next: the token belongs to a query with other filters or another order: ask again from the first page"
        )
    if not isinstance(job_id, str) or not isinstance(submitted, int | float):
        raise not_a_next_token(token)
    if query.sort == "submitted":
        value = float(value)
    elif not isinstance(value, str):
        raise not_a_next_token(token)
    return (value, float(submitted), job_id)
