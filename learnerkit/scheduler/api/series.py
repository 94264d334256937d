"""The metric series' routes: ``/v1/jobs/{id}/series`` (docs/api.md, "Metric series"), beside the jobs' in `app`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from learnerkit.scheduler.series.cache import SeriesCache
from learnerkit.scheduler.series.history import Axis
from learnerkit.scheduler.series.thinning import MIN_POINTS
from learnerkit.scheduler.series.window import DEFAULT_POINTS, MAX_POINTS

Learner = Annotated[int, Query(ge=1, description="1-based learner id")]
AxisQuery = Annotated[Axis, Query(description="step, or time (Unix seconds)")]
From = Annotated[float | None, Query(alias="from", description="the range's start on the axis; default: the first")]
To = Annotated[float | None, Query(alias="to", description="the range's end on the axis (included); default: the last")]
Points = Annotated[int, Query(ge=MIN_POINTS, le=MAX_POINTS, description="at most this many points")]


def series_router(cache: SeriesCache, tenant_of: Callable[..., Awaitable[str]], responses: dict[Any, Any]) -> APIRouter:
    """``tenant_of``: the app's token check (a dependency); ``responses``: the app's 401 and 404 bodies."""
    router = APIRouter(prefix="/v1", tags=["jobs"])

    @router.get("/jobs/{job_id}/series", responses=responses)
    async def job_series(job_id: str, learner: Learner = 1, tenant: str = Depends(tenant_of)) -> JSONResponse:
        """The scalar series of a learner's metric history, each with its number of points on either axis."""
        return JSONResponse(asdict(await cache.index(tenant, job_id, learner)))

    @router.get("/jobs/{job_id}/series/{name:path}", responses=responses)
    async def job_series_window(
        job_id: str,
        name: str,
        learner: Learner = 1,
        axis: AxisQuery = "step",
        start: From = None,
        end: To = None,
        points: Points = DEFAULT_POINTS,
        tenant: str = Depends(tenant_of),
    ) -> JSONResponse:
        """One series from ``from`` to ``to`` on the axis, thinned on the server (MinMaxLTTB) to at most ``points``:
        a chart draws it as it comes, and asks for a narrower range, at full resolution once it holds fewer
        points than that, when zoomed."""
        found = await cache.window(tenant, job_id, learner, name, axis=axis, start=start, end=end, points=points)
        return JSONResponse(asdict(found))

    return router
