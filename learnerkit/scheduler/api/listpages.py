"""A page of a list as the API answers it (`GET /v1/jobs`, `GET /v1/sweeps`): a JSON array, cut short at
`MAX_PAGE_BYTES`, with ``X-Total-Count`` and, when more follow, ``X-Next-Token`` and ``Link: rel="next"``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response
from pydantic import TypeAdapter

from learnerkit.scheduler.facade import MAX_PAGE_BYTES

T = TypeVar("T")
NEXT_TOKEN_HEADER = "X-Next-Token"  # noqa: S105 (a header name, not a token)
TOTAL_HEADER = "X-Total-Count"


def list_page_response(what: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI description of a page of ``what`` (``jobs``, ``sweeps``)."""
    return {
        200: {
            "description": f"a page of the tenant's {what}",
            "headers": {
                NEXT_TOKEN_HEADER: {"description": "pass as `next` for the page after; absent on the last"},
                TOTAL_HEADER: {"description": f"{what} over every page", "schema": {"type": "integer"}},
                "Link": {"description": '`<url>; rel="next"`: the next page, when there is one'},
            },
        },
    }


def page_response(
    request: Request,
    rows: Sequence[T],
    adapter: TypeAdapter[T],
    cursors: Sequence[str],
    next_token: str | None,
    total: int,
) -> Response:
    """``rows`` as a JSON array, cut short where it would pass `MAX_PAGE_BYTES`: the next token then continues
    after the last row sent (``cursors``: the token after each row)."""
    parts: list[bytes] = []
    size = 2
    for row in rows:
        encoded = adapter.dump_json(row)
        if parts and size + len(encoded) + 1 > MAX_PAGE_BYTES:
            break
        parts.append(encoded)
        size += len(encoded) + (1 if len(parts) > 1 else 0)
    if len(parts) < len(rows):
        next_token = cursors[len(parts) - 1]
    headers = {TOTAL_HEADER: str(total)}
    if next_token is not None:
        headers[NEXT_TOKEN_HEADER] = next_token
        headers["Link"] = f'<{request.url.include_query_params(next=next_token)}>; rel="next"'
    return Response(b"[" + b",".join(parts) + b"]", media_type="application/json", headers=headers)
