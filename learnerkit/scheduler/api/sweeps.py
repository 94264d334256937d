"""The sweeps' routes: ``/v1/sweeps`` (docs/api.md), beside the jobs' in `app`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, TypeAdapter, ValidationError

from learnerkit.common import cursor
from learnerkit.scheduler.api.listpages import list_page_response, page_response
from learnerkit.scheduler.api.multipart import BodyTimeouts, declared_too_large, receive_submission
from learnerkit.scheduler.api.ratelimit import RateLimiter
from learnerkit.scheduler.config.settings import LimitSettings
from learnerkit.scheduler.errors import (
    InvalidRequestError,
    ManifestTooLargeError,
    RateLimitedError,
    model_too_large,
    not_a_next_token,
)
from learnerkit.scheduler.facade import DEFAULT_PAGE_JOBS, MAX_PAGE_BYTES, MAX_PAGE_JOBS, SchedulerFacade, SweepView

JSON_OVERHEAD = 2
LIST_TAG = "v1/sweeps"
"""What a ``next`` token of the sweeps' list names (`common.cursor`): a token of another list is refused."""
_SWEEP_JSON = TypeAdapter(SweepView)


class SweepSubmitBody(BaseModel):
    search: str
    """The search file's YAML text."""
    manifest: str
    """The manifest's YAML text."""
    search_source: str = "search.yml"
    manifest_source: str = "manifest.yml"
    image: str | None = None


def sweeps_router(
    facade: SchedulerFacade, limits: LimitSettings, tenant_of: Callable[..., Awaitable[str]], responses: dict[Any, Any]
) -> APIRouter:
    """``tenant_of``: the app's token check (a dependency); ``responses``: the app's 401, 404 and 409 bodies."""
    router = APIRouter(prefix="/v1", tags=["sweeps"])
    submits = RateLimiter(limits.submits_per_minute, burst=limits.submits_per_minute)

    @router.post("/sweeps", status_code=201, response_model=SweepView, responses=responses)
    async def submit_sweep(request: Request, tenant: str = Depends(tenant_of)) -> SweepView:
        """Start a sweep: JSON ``{"search", "manifest", "search_source", "manifest_source", "image"}``, or
        multipart/form-data with the parts ``search``, ``search_source``, ``manifest``, ``source``, ``image``
        and, last, ``model`` (the model code every trial runs, stored once)."""
        wait = submits.take(tenant)
        if wait:
            raise RateLimitedError(f"tenant {tenant!r} submits more than {limits.submits_per_minute} a minute", wait)
        if request.headers.get("content-type", "").partition(";")[0].strip().lower() == "multipart/form-data":
            return await _submit_multipart(facade, tenant, request, limits)
        body = await _json_body(request, limits.max_manifest_bytes * 2 * JSON_OVERHEAD + 4096)
        return await facade.submit_sweep(
            tenant,
            body.search,
            body.manifest,
            search_source=body.search_source,
            manifest_source=body.manifest_source,
            image=body.image,
        )

    @router.get(
        "/sweeps",
        response_model=list[SweepView],
        responses=responses | list_page_response("sweeps") | {400: {"description": "a next token of another list"}},
    )
    async def list_sweeps(
        request: Request,
        limit: Annotated[
            int, Query(ge=1, le=MAX_PAGE_JOBS, description=f"sweeps per page (at most {MAX_PAGE_BYTES} bytes)")
        ] = DEFAULT_PAGE_JOBS,
        next_token: Annotated[str | None, Query(alias="next", description="the previous page's X-Next-Token")] = None,
        tenant: str = Depends(tenant_of),
    ) -> Response:
        """A page of the tenant's sweeps, oldest first (ties by id), as ``GET /v1/jobs`` pages its jobs:
        ``X-Next-Token`` (and a ``Link: rel="next"``) when more follow, ``X-Total-Count``."""
        found = sorted(await facade.list_sweeps(tenant), key=_oldest_first)
        try:
            chosen = cursor.page(found, _oldest_first, limit, next_token, LIST_TAG)
        except ValueError as e:
            raise not_a_next_token(next_token or "") from e
        return page_response(request, chosen.rows, _SWEEP_JSON, chosen.cursors, chosen.next, len(found))

    @router.get("/sweeps/{sweep_id}", response_model=SweepView, responses=responses)
    async def get_sweep(sweep_id: str, tenant: str = Depends(tenant_of)) -> SweepView:
        """One sweep: its rungs and every started trial, with why it continues, is paused or was stopped."""
        return await facade.get_sweep(tenant, sweep_id)

    @router.post("/sweeps/{sweep_id}/halt", response_model=SweepView, responses=responses)
    async def halt_sweep(sweep_id: str, tenant: str = Depends(tenant_of)) -> SweepView:
        """No trial starts or is promoted; running trials halt onto their checkpoints."""
        return await facade.halt_sweep(tenant, sweep_id)

    @router.post("/sweeps/{sweep_id}/resume", response_model=SweepView, responses=responses)
    async def resume_sweep(sweep_id: str, tenant: str = Depends(tenant_of)) -> SweepView:
        """Go on: halted trials resume from their checkpoints."""
        return await facade.resume_sweep(tenant, sweep_id)

    @router.post("/sweeps/{sweep_id}/cancel", response_model=SweepView, responses=responses)
    async def cancel_sweep(sweep_id: str, tenant: str = Depends(tenant_of)) -> SweepView:
        """Cancel every running trial; the sweep ends cancelled."""
        return await facade.cancel_sweep(tenant, sweep_id)

    return router


async def _json_body(request: Request, cap: int) -> SweepSubmitBody:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise ManifestTooLargeError(f"the sweep is over {cap} bytes, the most this scheduler reads")
    try:
        return SweepSubmitBody.model_validate_json(bytes(body))
    except ValidationError as e:
        raise InvalidRequestError(f'expected {{"search": "<yaml text>", "manifest": "<yaml text>"}}: {e}') from e


async def _submit_multipart(facade: SchedulerFacade, tenant: str, request: Request, limits: LimitSettings) -> SweepView:
    if declared_too_large(
        request.headers.get("content-length", ""), limits.max_manifest_bytes * 2, limits.max_model_bytes
    ):
        raise model_too_large(limits.max_model_bytes)
    received = await receive_submission(
        request.headers.get("content-type", ""),
        request.stream(),
        max_manifest_bytes=limits.max_manifest_bytes,
        max_model_bytes=limits.max_model_bytes,
        timeouts=BodyTimeouts(limits.upload_idle_s, limits.upload_total_s),
    )
    try:
        if received.search is None:
            raise InvalidRequestError("a sweep needs its search file: the part 'search'")
        return await facade.submit_sweep(
            tenant,
            received.search,
            received.manifest,
            search_source=received.search_source,
            manifest_source=received.source,
            image=received.image,
            model=received.model,
        )
    finally:
        if received.model is not None:
            async for _chunk in received.model:
                pass


def _oldest_first(view: SweepView) -> tuple[str, str]:
    """The list's order and its pages' key: submission (ISO-8601 UTC to the second: they sort as text), then id."""
    return (view.submitted_at, view.sweep_id)
