"""The Images view: `/ui/images`, the learner image matrix with what is built and each image's scan verdict; an
image's page `/ui/images/{spec}` with its findings, tests and documents (`/ui/images/{spec}/records/{name}`, the
scan's records; `/ui/images/{spec}/statements/{kind}`, what `image publish` would sign). The same for every
tenant: the images are the platform's."""

from __future__ import annotations

import json

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from learnerkit.scheduler.console import images_views
from learnerkit.scheduler.console.access import Current, PageError
from learnerkit.scheduler.console.rendering import SECURITY_HEADERS, Renderer


def add_image_routes(router: APIRouter, render: Renderer) -> None:
    def find(spec: str) -> images_views.ImageView:
        for image in images_views.matrix().images:
            if image.name == spec:
                return images_views.image_view(image)
        raise PageError(404, "Not found", f"The image matrix has no image {spec!r}.")

    @router.get("/images")
    async def images_page(session: Current) -> Response:
        views = await run_in_threadpool(lambda: images_views.image_views(images_views.matrix().images))
        frameworks: dict[str, list[images_views.ImageView]] = {}
        for view in views:
            frameworks.setdefault(view.framework, []).append(view)
        return render.page(
            "images.html.j2",
            session=session,
            title="Images",
            frameworks=frameworks,
            variants=sorted({v.variant for v in views}),
            built=sum(1 for v in views if v.image_id),
            total=len(views),
        )

    @router.get("/images/{spec}")
    async def image_page(spec: str, session: Current) -> Response:
        view = await run_in_threadpool(find, spec)
        made = await run_in_threadpool(images_views.statements_of, view)
        return render.page(
            "image.html.j2",
            session=session,
            title=f"Image {view.spec}",
            image=view,
            statements=[kind for kind in images_views.STATEMENTS if kind in made],
        )

    @router.get("/images/{spec}/records/{document}")
    async def image_record(spec: str, document: str, session: Current) -> Response:
        view = await run_in_threadpool(find, spec)
        path = images_views.record_file(view.image_id, document) if view.image_id else None
        if path is None:
            raise PageError(404, "Not found", f"No {document!r} record of {spec} on this host.")
        name = f"{spec.replace(':', '_')}-{path.name}"
        return FileResponse(path, media_type="application/json", filename=name, headers=SECURITY_HEADERS)

    @router.get("/images/{spec}/statements/{kind}")
    async def image_statement(spec: str, kind: str, session: Current) -> Response:
        view = await run_in_threadpool(find, spec)
        found = (await run_in_threadpool(images_views.statements_of, view)).get(kind)
        if found is None:
            raise PageError(
                404,
                "Not found",
                f"No {kind!r} statement of {spec}: it needs the image built, tested and scanned here "
                "(and a VEX, a vulnerability the scan saw).",
            )
        body = json.dumps(found, indent=2, sort_keys=True).encode()
        headers = SECURITY_HEADERS | {
            "Content-Disposition": f"attachment; filename={spec.replace(':', '_')}-{kind}.intoto.json"
        }
        return Response(body, media_type="application/json", headers=headers)
