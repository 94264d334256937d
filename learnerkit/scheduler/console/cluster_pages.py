"""The Cluster page (`/ui/cluster`), an operator's alone: the nodes' capacity and use with their cordon and drain
state, every tenant's quota, weight and use, and the usage analytics (jobs per day, CPU- and GPU-hours per tenant
and framework), also as CSV (`/ui/cluster/analytics.csv`). A tenant's session gets the console's 404 page, as for
a page that does not exist."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from learnerkit.scheduler.console import cluster_views
from learnerkit.scheduler.console.access import Current, PageError
from learnerkit.scheduler.console.rendering import SECURITY_HEADERS, Renderer
from learnerkit.scheduler.console.sessions import Session
from learnerkit.scheduler.console.views import human_size, readable_time
from learnerkit.scheduler.facade import SchedulerFacade


def _operator(session: Session, page: str) -> None:
    if not session.operator:
        raise PageError(404, "Not found", f"The console has no page {page!r}.")


def add_cluster_routes(router: APIRouter, facade: SchedulerFacade, render: Renderer) -> None:
    @router.get("/cluster")
    async def cluster_page(session: Current) -> Response:
        _operator(session, "cluster")
        view = await facade.cluster()
        return render.page(
            "cluster.html.j2",
            session=session,
            title="Cluster",
            cluster=view,
            totals=cluster_views.tenant_framework_totals(view.usage),
            days=cluster_views.days(view.usage),
            hours=cluster_views.hours,
            quota=cluster_views.quota,
            human_size=human_size,
            readable_time=readable_time,
        )

    @router.get("/cluster/analytics.csv")
    async def analytics_csv(session: Current) -> Response:
        _operator(session, "cluster/analytics.csv")
        view = await facade.cluster()
        name = f"learnerkit-analytics-{view.as_of[:16].replace(':', '')}.csv"
        headers = SECURITY_HEADERS | {"Content-Disposition": f'attachment; filename="{name}"'}
        return Response(cluster_views.analytics_csv(view), media_type="text/csv; charset=utf-8", headers=headers)
