"""The submit page: a manifest (typed in the page or uploaded) and its model code (a zip or a folder,
`model_folder`), sent as one plain multipart form and read by the API's own reader (`Intake`), so an upload over
the limits is refused as the API refuses it, before it is stored; then checked and queued by the facade's
`submit`, as `POST /v1/jobs` does."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.common.yamlfile import YamlError
from learnerkit.scheduler.console.access import PREFIX, Current, check_csrf
from learnerkit.scheduler.console.model_folder import FilePart, chosen_model
from learnerkit.scheduler.console.rendering import Renderer
from learnerkit.scheduler.console.sessions import Session
from learnerkit.scheduler.errors import (
    ClientGoneError,
    ManifestTooLargeError,
    ModelTooLargeError,
    RateLimitedError,
    UploadTimeoutError,
)
from learnerkit.scheduler.facade import SchedulerFacade

LOGGER = logging.getLogger(__name__)
DEFAULT_SOURCE = "manifest.yml"
"""The name problems of a manifest typed in the page are reported under (the API's, for a body without one)."""
CSRF_BYTES = 256


class Received(Protocol):
    """What the API's multipart reader hands on (`learnerkit.scheduler.api.multipart.Submission`)."""

    @property
    def texts(self) -> Mapping[str, str]: ...
    @property
    def filenames(self) -> Mapping[str, str]: ...
    @property
    def image(self) -> str | None: ...
    @property
    def files(self) -> AsyncIterator[bytes | FilePart] | None: ...


@dataclass(frozen=True)
class Intake:
    """The API's handling of a submit's body, lent to the console (which sits below the API)."""

    read: Callable[[Request, Mapping[str, int]], Awaitable[Received]]
    """Read a multipart submit with these extra text parts (name: most bytes); `ModelTooLargeError` for a body
    declared or found over the limits, before any of it is stored."""
    take: Callable[[str], float]
    """The API's submit rate limit, shared: 0 when the tenant may submit now, else the seconds to wait."""
    per_minute: int
    max_manifest_bytes: int
    max_model_bytes: int


@dataclass(frozen=True)
class SubmitForm:
    csrf: str
    manifest: str
    """The uploaded file's text when one was chosen, else the text area's."""
    source: str
    """The uploaded file's name, or `DEFAULT_SOURCE`."""
    image: str | None
    files: AsyncIterator[bytes | FilePart] | None
    """The file parts: the model's zip or folder (`chosen_model`)."""


async def read_submit_form(intake: Intake, request: Request) -> SubmitForm:
    received = await intake.read(request, {"csrf": CSRF_BYTES, "manifest_file": intake.max_manifest_bytes})
    uploaded = received.texts.get("manifest_file", "")
    if uploaded:
        text, source = uploaded, _base_name(received.filenames.get("manifest_file", "")) or DEFAULT_SOURCE
    else:
        # A browser sends a text area's line ends as CRLF; the person typed LF.
        text, source = received.texts.get("manifest", "").replace("\r\n", "\n"), DEFAULT_SOURCE
    return SubmitForm(
        received.texts.get("csrf", ""), text, source, (received.image or "").strip() or None, received.files
    )


def _base_name(filename: str) -> str:
    return filename.replace("\\", "/").rsplit("/", 1)[-1].strip()


def add_submit_routes(router: APIRouter, facade: SchedulerFacade, render: Renderer, intake: Intake) -> None:
    @router.get("/submit")
    async def submit_page(session: Current) -> Response:
        return _page(render, session)

    @router.post("/submit")
    async def submit(request: Request, session: Current) -> Response:
        form: SubmitForm | None = None
        model: AsyncGenerator[bytes, None] | None = None
        try:
            form = await read_submit_form(intake, request)
            check_csrf(session, form.csrf)
            _spend_a_submit(intake, session.tenant)
            if form.files is not None:
                model = await chosen_model(form.files, intake.max_model_bytes)
            job = await facade.submit(session.tenant, form.manifest, source=form.source, image=form.image, model=model)
        except YamlError as e:
            count = len(e.problems)
            error = f"{count} problem{'s' if count != 1 else ''} in the manifest"
            return _page(
                render, session, form, model is not None, error=error, problems=[str(p) for p in e.problems], status=422
            )
        except (ModelTooLargeError, ManifestTooLargeError) as e:
            return _page(render, session, form, model is not None, error=str(e), status=413)
        except RateLimitedError as e:
            error = f"Too many submits; try again in {max(1, round(e.retry_after_s))} s."
            return _page(render, session, form, model is not None, error=error, status=429)
        except UploadTimeoutError as e:
            return _page(render, session, form, model is not None, error=str(e), status=408)
        except ClientGoneError:
            LOGGER.warning("%s: the browser went away during a submit; its model upload is aborted", session.tenant)
            raise
        except ConfigError as e:
            return _page(render, session, form, model is not None, error=str(e), status=400)
        except LearnerkitError:
            LOGGER.exception("console: a submit of %s failed", session.tenant)
            error = "The scheduler failed to queue the job; its operators find why in the scheduler's log."
            return _page(render, session, form, model is not None, error=error, status=500)
        finally:
            if model is not None:
                await model.aclose()
            if form is not None and form.files is not None:
                await _drain(form.files)
        return RedirectResponse(f"{PREFIX}/jobs/{job.job_id}", status_code=303)


def _spend_a_submit(intake: Intake, tenant: str) -> None:
    """`RateLimitedError` past the API's submit rate of the tenant (the API's and the console's together)."""
    wait = intake.take(tenant)
    if wait:
        raise RateLimitedError(f"tenant {tenant!r} submits more than {intake.per_minute} a minute", wait)


async def _drain(model: AsyncIterator[bytes | FilePart]) -> None:
    """What is left of a model refused unread: the browser, still sending it, then gets the page."""
    try:
        async for _chunk in model:
            pass
    except LearnerkitError:
        return


def _page(
    render: Renderer,
    session: Session,
    form: SubmitForm | None = None,
    had_model: bool = False,
    *,
    error: str = "",
    problems: list[str] | None = None,
    status: int = 200,
) -> Response:
    return render.page(
        "submit.html.j2",
        status=status,
        session=session,
        title="Submit a job",
        manifest=form.manifest if form else "",
        image=form.image or "" if form else "",
        had_model=had_model,
        error=error,
        problems=problems or [],
    )
