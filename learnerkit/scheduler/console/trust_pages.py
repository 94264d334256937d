"""The trust panel of a job: `/ui/jobs/{id}/trust`, the job's provenance checked on the server; its
`/panel` part, which `static/trust.js` fetches again while the page is open, so a change in the store shows
without a reload."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from learnerkit.scheduler.console import trust_views
from learnerkit.scheduler.console.access import Current, not_found
from learnerkit.scheduler.console.rendering import Renderer
from learnerkit.scheduler.console.sessions import Session
from learnerkit.scheduler.console.trust_checks import TrustChecker
from learnerkit.scheduler.errors import UnknownJobError
from learnerkit.scheduler.facade import JobView, SchedulerFacade


def add_trust_routes(router: APIRouter, facade: SchedulerFacade, render: Renderer, checker: TrustChecker) -> None:
    async def panel(session: Session, job_id: str) -> dict[str, Any]:
        try:
            job: JobView = await facade.get(session.tenant, job_id)
            found = await checker.check(session.tenant, job_id)
        except UnknownJobError as e:
            raise not_found(job_id) from e
        context: dict[str, Any] = {
            "job": job,
            "found": found,
            "checked_at": datetime.fromtimestamp(found.checked_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "every_s": max(1, round(checker.recheck_s / 2)),
            "verified": False,
            "verdict": found.problem,
            "problems": [],
            "sections": [],
            "factsheet": [],
            "rounds": [],
            "polyline": trust_views.polyline,
        }
        if found.report is not None and found.folder is not None:
            verified, verdict = trust_views.verdict_line(found.report.checks, found.report.key_id)
            context |= {
                "verified": verified,
                "verdict": verdict,
                "problems": trust_views.problems(found.report.checks),
                "sections": trust_views.sections(found.report.checks),
                "factsheet": await run_in_threadpool(trust_views.factsheet, found.folder),
                "rounds": await run_in_threadpool(trust_views.rounds, found.folder, checker.keys),
            }
        return context

    @router.get("/jobs/{job_id}/trust")
    async def trust_page(job_id: str, session: Current) -> Response:
        context = await panel(session, job_id)
        job = context["job"]
        return render.page("trust.html.j2", session=session, title=f"Trust: {job.name} ({job.job_id})", **context)

    @router.get("/jobs/{job_id}/trust/panel")
    async def trust_panel(job_id: str, session: Current) -> Response:
        return render.page("trust_panel.html.j2", session=session, **(await panel(session, job_id)))
