"""The console's sweep pages: the tenant's sweeps, one sweep's rung table, timelines and plots, and its halt,
resume and cancel, each through the facade's operation the REST API calls (``/v1/sweeps``), so a refusal shows
the facade's words, the ones `learnerkit sweep` prints; the page offers only the verbs the sweep's state takes
(`SweepStatus.refuses`, the rule the facade refuses by). The plots' data come as JSON for `static/sweeps.js`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from learnerkit.scheduler.console import views
from learnerkit.scheduler.console.access import PREFIX, Current, PageError, changing_form
from learnerkit.scheduler.console.paging import DEFAULT_LIMIT, Limit, page_of
from learnerkit.scheduler.console.rendering import Renderer
from learnerkit.scheduler.console.sweeps_views import (
    best_so_far,
    marks,
    plot_data,
    segments,
    sweep_row,
    thin,
    trial_row,
    unique_steps,
)
from learnerkit.scheduler.errors import JobStateError, UnknownJobError, UnknownMetricError
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.facade import AttemptView, SchedulerFacade, SweepView, TrialView
from learnerkit.scheduler.series.cache import SeriesCache
from learnerkit.scheduler.sweeps.store import SweepStatus, SweepVerb


@dataclass(frozen=True)
class SweepAction:
    name: SweepVerb
    label: str
    question: str
    done: str
    call: Callable[[SchedulerFacade, str, str], Awaitable[SweepView]]


SWEEP_ACTIONS: dict[str, SweepAction] = {
    a.name: a
    for a in (
        SweepAction(
            "halt",
            "Halt",
            "Halt this sweep? No trial starts or is promoted; running trials halt onto their checkpoints.",
            "Halt asked for: running trials halt onto their checkpoints.",
            lambda facade, tenant, sweep_id: facade.halt_sweep(tenant, sweep_id),
        ),
        SweepAction(
            "resume",
            "Resume",
            "Resume this sweep? Halted trials go on from their checkpoints.",
            "Resumed: halted trials go on from their checkpoints.",
            lambda facade, tenant, sweep_id: facade.resume_sweep(tenant, sweep_id),
        ),
        SweepAction(
            "cancel",
            "Cancel",
            "Cancel this sweep? Every running trial is cancelled; the sweep cannot be resumed.",
            "Cancelled.",
            lambda facade, tenant, sweep_id: facade.cancel_sweep(tenant, sweep_id),
        ),
    )
}


def add_sweep_routes(router: APIRouter, facade: SchedulerFacade, render: Renderer, events: EventHub | None) -> None:
    def position() -> str:
        return str(events.latest) if events is not None and events.ready.is_set() else ""

    async def sweep_of(session_tenant: str, sweep_id: str) -> SweepView:
        try:
            return await facade.get_sweep(session_tenant, sweep_id)
        except UnknownJobError as e:
            raise PageError(404, "Not found", f"There is no sweep {sweep_id!r}.") from e

    async def attempts_of(tenant: str, trials: Iterable[TrialView]) -> dict[str, tuple[AttemptView, ...]]:
        async def one(job_id: str) -> tuple[str, tuple[AttemptView, ...]]:
            try:
                return job_id, (await facade.get(tenant, job_id)).attempts
            except UnknownJobError:  # deleted since
                return job_id, ()

        return dict(await asyncio.gather(*(one(t.job_id) for t in trials)))

    @router.get("/sweeps")
    async def sweeps_page(
        session: Current, next_token: Annotated[str, Query(alias="next")] = "", limit: Limit = DEFAULT_LIMIT
    ) -> Response:
        live_after = position()
        found = sorted(await facade.list_sweeps(session.tenant), key=_newest_first)
        paged = page_of(found, _newest_first, limit, next_token, list_name="sweeps")
        names = await asyncio.gather(*(_name(facade, session.tenant, v) for v in paged.rows))
        return render.page(
            "sweeps.html.j2",
            session=session,
            title="Sweeps",
            rows=[sweep_row(v, name) for v, name in zip(paged.rows, names, strict=True)],
            **paged.controls(f"{PREFIX}/sweeps", next_token),
            readable_time=views.readable_time,
            sweeps_live_after=live_after,
        )

    @router.get("/sweeps/{sweep_id}")
    async def sweep_page(
        sweep_id: str,
        session: Current,
        done: str = "",
        next_token: Annotated[str, Query(alias="next")] = "",
        limit: Limit = DEFAULT_LIMIT,
    ) -> Response:
        live_after = position()
        view = await sweep_of(session.tenant, sweep_id)
        paged = page_of(view.trials, lambda t: (t.index,), limit, next_token, list_name=f"trials of {view.sweep_id}")
        attempts = await attempts_of(session.tenant, paged.rows)
        action = SWEEP_ACTIONS.get(done)
        return render.page(
            "sweep.html.j2",
            session=session,
            title=f"Sweep {view.sweep_id}",
            sweep=view,
            done=action.done if action else "",
            actions=tuple(a for a in SWEEP_ACTIONS.values() if SweepStatus(view.status).refuses(a.name) is None),
            best=plot_data(view)["best"],
            trials=[trial_row(t) for t in paged.rows],
            timelines=[(t.job_id, segments(attempts.get(t.job_id, ()), t.state)) for t in paged.rows],
            **paged.controls(f"{PREFIX}/sweeps/{quote(view.sweep_id)}", next_token),
            readable_time=views.readable_time,
            sweeps_live_after=live_after,
        )

    @router.get("/sweeps/{sweep_id}/data")
    async def sweep_data(sweep_id: str, session: Current) -> JSONResponse:
        try:
            view = await facade.get_sweep(session.tenant, sweep_id)
        except UnknownJobError:
            return _not_found(f"There is no sweep {sweep_id!r}.")
        data = plot_data(view)
        data["best_so_far"] = best_so_far(view, await attempts_of(session.tenant, view.trials))
        return JSONResponse(data)

    @router.get("/sweeps/{sweep_id}/curves/{job_id}")
    async def trial_curve(request: Request, sweep_id: str, job_id: str, session: Current) -> JSONResponse:
        try:
            view = await facade.get_sweep(session.tenant, sweep_id)
        except UnknownJobError:
            return _not_found(f"There is no sweep {sweep_id!r}.")
        trial = next((t for t in view.trials if t.job_id == job_id), None)
        if trial is None:
            return _not_found(f"Sweep {sweep_id} has no trial {job_id!r}.")
        cache: SeriesCache = request.app.state.series
        try:
            series = await cache.series(session.tenant, job_id, 1, view.metric)
        except (UnknownJobError, UnknownMetricError):
            x: list[float] = []
            y: list[float] = []
        else:
            x, y = unique_steps(series.by_step.x, series.by_step.y)
        steps = len(x)
        x, y = thin(x, y)
        body = {"job_id": job_id, "metric": view.metric, "steps": steps, "x": x, "y": y, "marks": marks(view, trial)}
        return JSONResponse(body)

    @router.post("/sweeps/{sweep_id}/actions/{name}")
    async def act(sweep_id: str, name: str, request: Request, session: Current) -> Response:
        form = await changing_form(request, session)
        action = SWEEP_ACTIONS.get(name)
        if action is None:
            raise PageError(404, "Not found", f"There is no sweep action {name!r}: {', '.join(SWEEP_ACTIONS)}.")
        view = await sweep_of(session.tenant, sweep_id)
        if form.get("confirmed") != "yes":
            return render.page(
                "sweep_confirm.html.j2",
                session=session,
                title=f"{action.label}: sweep {view.sweep_id}",
                sweep=view,
                action=action,
            )
        try:
            await action.call(facade, session.tenant, sweep_id)
        except UnknownJobError as e:
            raise PageError(404, "Not found", f"There is no sweep {sweep_id!r}.") from e
        except JobStateError as e:
            raise PageError(409, f"{action.label}: refused", str(e)) from e
        return RedirectResponse(f"{PREFIX}/sweeps/{quote(sweep_id)}?done={action.name}", status_code=303)


async def _name(facade: SchedulerFacade, tenant: str, view: SweepView) -> str:
    """The sweep's name: its trials' (the manifest's); empty before a trial started."""
    if not view.trials:
        return ""
    try:
        return (await facade.get(tenant, view.trials[0].job_id)).name
    except UnknownJobError:
        return ""


def _newest_first(view: SweepView) -> tuple[float, str]:
    """The list's order and its pages' key: newest first, then by id."""
    return (-datetime.fromisoformat(view.submitted_at).timestamp() if view.submitted_at else 0.0, view.sweep_id)


def _not_found(message: str) -> JSONResponse:
    return JSONResponse({"error": "not_found", "message": message}, status_code=404)
