"""The Compare page, ``/ui/compare?jobs=a,b,c``: 2 to 50 of the tenant's jobs (or a sweep's trials) side by side,
their curves overlaid (`static/compare.js`, from the JSON routes here) and a table of what differs, rendered on
the server so that it reads without JavaScript."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated
from urllib.parse import urlencode

import orjson
import yaml
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.console.access import PREFIX, Current, PageError
from learnerkit.scheduler.console.compare_views import (
    MAX_JOBS,
    MIN_JOBS,
    PROVENANCE_FILE,
    JobFacts,
    TooManyJobs,
    differences,
    flatten,
    job_ids,
    provenance_sections,
    read_envelope,
    text,
)
from learnerkit.scheduler.console.rendering import Renderer
from learnerkit.scheduler.errors import (
    InvalidRequestError,
    JobStateError,
    UnknownFileError,
    UnknownJobError,
)
from learnerkit.scheduler.facade import JobView, SchedulerFacade, SweepView
from learnerkit.scheduler.series.cache import SeriesCache
from learnerkit.scheduler.series.history import Axis, History
from learnerkit.scheduler.series.thinning import MIN_POINTS
from learnerkit.scheduler.series.window import DEFAULT_POINTS, MAX_POINTS, window

LOGGER = logging.getLogger(__name__)
Jobs = Annotated[list[str] | None, Query()]


def add_compare_routes(router: APIRouter, facade: SchedulerFacade, render: Renderer) -> None:
    @router.get("/compare")
    async def compare_page(session: Current, jobs: Jobs = None, add: str = "", show: str = "") -> Response:
        asked = [*(jobs or ()), add]
        try:
            ids = job_ids(asked)
        except TooManyJobs as e:
            raise PageError(400, "Too many jobs", str(e)) from e
        canonical = _address(ids, show_all=show == "all")
        if len(jobs or ()) > 1 or add.strip():  # the jobs list's checkboxes, the add field: one shareable address
            return RedirectResponse(canonical, status_code=303)
        found = await asyncio.gather(*(_job_or_none(facade, session.tenant, i) for i in ids))
        unknown = [i for i, job in zip(ids, found, strict=True) if job is None]
        if unknown:
            # Another tenant's job and one that does not exist read the same: the page never tells them apart.
            known = [i for i in ids if i not in unknown]
            listed = ", ".join(repr(i) for i in unknown)
            message = f"There is no job {listed}." if len(unknown) == 1 else f"There are no jobs {listed}."
            return _page(render, session, ids=ids, error=message, without=_address(known), status=404)
        views = [job for job in found if job is not None]
        facts = await asyncio.gather(*(_facts(facade, session.tenant, job) for job in views))
        show_all = show == "all"
        return _page(
            render,
            session,
            ids=ids,
            jobs=facts,
            sections=differences(facts, show_all=show_all) if len(facts) >= MIN_JOBS else [],
            show_all=show_all,
            toggle=_address(ids, show_all=not show_all),
            removals={i: _address([j for j in ids if j != i], show_all=show_all) for i in ids},
        )

    @router.get("/compare/series")
    async def compare_curves(
        request: Request,
        session: Current,
        jobs: Jobs = None,
        axis: Axis = "step",
        points: Annotated[int, Query(ge=MIN_POINTS, le=MAX_POINTS)] = DEFAULT_POINTS,
    ) -> Response:
        """Every scalar of the jobs' learner 1 (the union, first met first), each job's whole series thinned to
        ``points``: the first drawing of the page's charts in one request (one reading of each history)."""
        return await _curves(request, session.tenant, jobs, axis=axis, points=points)

    @router.get("/compare/series/{name:path}")
    async def compare_window(
        request: Request,
        name: str,
        session: Current,
        jobs: Jobs = None,
        axis: Axis = "step",
        start: Annotated[float | None, Query(alias="from")] = None,
        end: Annotated[float | None, Query(alias="to")] = None,
        points: Annotated[int, Query(ge=MIN_POINTS, le=MAX_POINTS)] = DEFAULT_POINTS,
    ) -> Response:
        """The range asked for of series ``name`` of each job that has it, each thinned to ``points`` (a zoom)."""
        return await _curves(request, session.tenant, jobs, axis=axis, points=points, name=name, span=(start, end))


async def _curves(
    request: Request,
    tenant: str,
    jobs: list[str] | None,
    *,
    axis: Axis,
    points: int,
    name: str | None = None,
    span: tuple[float | None, float | None] = (None, None),
) -> Response:
    cache: SeriesCache = request.app.state.series
    try:
        ids = job_ids(jobs or ())
    except TooManyJobs as e:
        return _json_error(400, "bad_request", str(e))

    async def history(job_id: str) -> History | None:
        try:
            return await cache.history(tenant, job_id, 1)
        except UnknownJobError:
            raise
        except LearnerkitError as e:
            LOGGER.info("console: compare: no history of %s: %s", job_id, e)
            return None

    try:
        histories = await asyncio.gather(*(history(i) for i in ids))
        series = await asyncio.to_thread(_windows, ids, histories, name, axis, points, span)
    except UnknownJobError:
        return _json_error(404, "not_found", "A job of this compare is not yours or no longer exists.")
    except InvalidRequestError as e:
        return _json_error(400, "bad_request", str(e))
    without = [i for i, found in zip(ids, histories, strict=True) if found is None or not found.series]
    # orjson: 50 jobs' thinned series are some 100,000 floats a chart; the json module takes several times longer.
    body = {"jobs": ids, "axis": axis, "without": without, "series": series}
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


def _windows(
    ids: list[str],
    histories: list[History | None],
    name: str | None,
    axis: Axis,
    points: int,
    span: tuple[float | None, float | None],
) -> dict[str, list[dict[str, object]]]:
    """Series name -> each job's window of it (the jobs that have it), in a worker thread: thinning is numpy's."""
    found: dict[str, list[dict[str, object]]] = {} if name is None else {name: []}
    for job_id, history in zip(ids, histories, strict=True):
        for series in history.series.values() if history else ():
            if name is not None and series.name != name:
                continue
            cut = window(series, axis, start=span[0], end=span[1], points=points)
            found.setdefault(series.name, []).append({"job_id": job_id, **vars(cut)})
    return found


def _address(ids: list[str], *, show_all: bool = False) -> str:
    query = {"jobs": ",".join(ids)} if ids else {}
    return f"{PREFIX}/compare" + (
        f"?{urlencode(query | ({'show': 'all'} if show_all else {}), safe=',')}" if query else ""
    )


def _page(render: Renderer, session: object, *, ids: list[str], status: int = 200, **context: object) -> Response:
    defaults: dict[str, object] = {
        "jobs": [],
        "sections": [],
        "error": "",
        "without": "",
        "show_all": False,
        "toggle": "",
        "removals": {},
    }
    return render.page(
        "compare.html.j2",
        status=status,
        session=session,
        title="Compare",
        ids=ids,
        joined=",".join(ids),
        max_jobs=MAX_JOBS,
        min_jobs=MIN_JOBS,
        **(defaults | context),
    )


def _json_error(status: int, error: str, message: str) -> JSONResponse:
    return JSONResponse({"error": error, "message": message}, status_code=status)


async def _job_or_none(facade: SchedulerFacade, tenant: str, job_id: str) -> JobView | None:
    try:
        return await facade.get(tenant, job_id)
    except UnknownJobError:
        return None


async def _facts(facade: SchedulerFacade, tenant: str, job: JobView) -> JobFacts:
    sections: dict[str, dict[str, str]] = {}
    notes: dict[str, str] = {}
    manifest = yaml.safe_load(await facade.manifest(tenant, job.job_id))
    sections["Manifest"] = flatten(manifest if isinstance(manifest, dict) else {})
    if job.sweep is None:
        notes["Parameters"] = "not a sweep's trial: no parameters"
    else:
        sweep = await _sweep(facade, tenant, job.sweep.sweep_id)
        trial = next((t for t in sweep.trials if t.index == job.sweep.trial), None) if sweep else None
        if trial is None:
            notes["Parameters"] = f"trial {job.sweep.trial} of {job.sweep.sweep_id} is not known to the scheduler"
        else:
            sections["Parameters"] = {key: text(value) for key, value in sorted(trial.parameters.items())}
    why = await _provenance(facade, tenant, job, sections)
    if why:
        notes.update(dict.fromkeys(("Images", "Data", "Provenance"), why))
    evaluation = {"model verdict": job.model}
    evaluation.update({f"evaluation {e.name}": e.outcome for e in job.evaluations})
    sections["Evaluation"] = evaluation
    return JobFacts(job.job_id, job.name, job.status, sections, notes)


async def _sweep(facade: SchedulerFacade, tenant: str, sweep_id: str) -> SweepView | None:
    try:
        return await facade.get_sweep(tenant, sweep_id)
    except UnknownJobError:  # UnknownSweepError included
        return None


async def _provenance(facade: SchedulerFacade, tenant: str, job: JobView, sections: dict[str, dict[str, str]]) -> str:
    """Fills the sections the job's provenance gives; or says why there are none."""
    try:
        stream = await facade.open_output(tenant, job.job_id, PROVENANCE_FILE)
        raw = await run_in_threadpool(stream.read)
    except UnknownFileError:
        return "no provenance yet" if job.status not in ("COMPLETED", "FAILED", "HALTED") else "no provenance stored"
    except (UnknownJobError, JobStateError) as e:
        return f"its provenance cannot be read: {e}"
    except LearnerkitError as e:
        LOGGER.warning("console: compare: the provenance of %s cannot be read: %s", job.job_id, e)
        return "its provenance cannot be read now: the job's object store did not answer"
    try:
        sections.update(provenance_sections(read_envelope(raw)))
    except ValueError as e:
        return str(e)
    return ""
