"""The charts' data on the console: the REST API's metric series (docs/api.md, "Metric series") under ``/ui/``,
with the session cookie instead of a token, and errors as JSON for `static/charts.js` to show.

No ``from __future__ import annotations``: the routes' parameters name ``session_of``, a local, which FastAPI could
not find when it resolves annotations as strings."""

from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from learnerkit.scheduler.console.sessions import Session
from learnerkit.scheduler.errors import InvalidRequestError, UnknownJobError, UnknownMetricError
from learnerkit.scheduler.series.cache import SeriesCache
from learnerkit.scheduler.series.history import Axis
from learnerkit.scheduler.series.thinning import MIN_POINTS
from learnerkit.scheduler.series.window import DEFAULT_POINTS, MAX_POINTS

Learner = Annotated[int, Query(ge=1)]


def series_routes(session_of: Callable[..., Any]) -> APIRouter:
    """``session_of``: the console's session check (a redirect to the log-in without one)."""
    router = APIRouter()

    @router.get("/jobs/{job_id}/series")
    async def index(
        request: Request, job_id: str, session: Annotated[Session, Depends(session_of)], learner: Learner = 1
    ) -> JSONResponse:
        cache: SeriesCache = request.app.state.series
        try:
            return JSONResponse(asdict(await cache.index(session.tenant, job_id, learner)))
        except UnknownJobError:
            return _not_found(f"There is no job {job_id!r}.")

    @router.get("/jobs/{job_id}/series/{name:path}")
    async def window(
        request: Request,
        job_id: str,
        name: str,
        session: Annotated[Session, Depends(session_of)],
        learner: Learner = 1,
        axis: Axis = "step",
        start: Annotated[float | None, Query(alias="from")] = None,
        end: Annotated[float | None, Query(alias="to")] = None,
        points: Annotated[int, Query(ge=MIN_POINTS, le=MAX_POINTS)] = DEFAULT_POINTS,
    ) -> JSONResponse:
        cache: SeriesCache = request.app.state.series
        try:
            found = await cache.window(
                session.tenant, job_id, learner, name, axis=axis, start=start, end=end, points=points
            )
        except UnknownJobError:
            return _not_found(f"There is no job {job_id!r}.")
        except UnknownMetricError as e:
            return _not_found(str(e))
        except InvalidRequestError as e:
            return JSONResponse({"error": "bad_request", "message": str(e)}, status_code=400)
        return JSONResponse(asdict(found))

    return router


def _not_found(message: str) -> JSONResponse:
    return JSONResponse({"error": "not_found", "message": message}, status_code=404)
