"""The console's pages: each is the HTML rendering of a view the REST API returns as JSON (`SchedulerFacade`),
rendered on the server so that it reads without JavaScript."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, cast
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from securesystemslib.signer import Key
from starlette.concurrency import run_in_threadpool

from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.common.instants import parse_instant
from learnerkit.scheduler.console import views
from learnerkit.scheduler.console.access import (
    PREFIX,
    SESSION_COOKIE,
    Current,
    LoginRequired,
    PageError,
    PageRoute,
    changing_form,
    not_found,
    session_of,
)
from learnerkit.scheduler.console.actions import ACTIONS, add_action_routes, done_notice
from learnerkit.scheduler.console.cluster_pages import add_cluster_routes
from learnerkit.scheduler.console.compare_pages import add_compare_routes
from learnerkit.scheduler.console.forms import FormError, read_form
from learnerkit.scheduler.console.images_pages import add_image_routes
from learnerkit.scheduler.console.origin import refusal
from learnerkit.scheduler.console.paging import DEFAULT_LIMIT, PAGE_SIZES, Limit, page_links
from learnerkit.scheduler.console.queue_pages import add_queue_routes
from learnerkit.scheduler.console.rendering import Renderer
from learnerkit.scheduler.console.series import series_routes
from learnerkit.scheduler.console.sessions import Session, SessionStore, Tokens, csrf_matches
from learnerkit.scheduler.console.submitting import Intake, add_submit_routes
from learnerkit.scheduler.console.sweeps_pages import add_sweep_routes
from learnerkit.scheduler.console.trust_checks import RECHECK_S, TrustChecker
from learnerkit.scheduler.console.trust_pages import add_trust_routes
from learnerkit.scheduler.errors import (
    AuthError,
    JobStateError,
    RateLimitedError,
    UnknownFileError,
    UnknownJobError,
)
from learnerkit.scheduler.events.hub import EventHub, TooManyStreams
from learnerkit.scheduler.events.responses import event_stream, resume_point
from learnerkit.scheduler.facade import JobQuery, JobView, LogStream, SchedulerFacade, StoredFile

LOGGER = logging.getLogger(__name__)
LOGIN_COOKIE = "learnerkit_login"


@dataclass(frozen=True)
class ConsoleSettings:
    names: frozenset[str]
    """The Host names the scheduler answers to (`origin.own_names`); any other is refused."""
    secure: bool = False
    """Served over TLS: cookies are marked Secure."""
    keys: tuple[Key, ...] = ()
    """The platform's public keys (`GET /v1/keys`): the trust panel checks provenance with them."""
    trust_recheck_s: float = RECHECK_S
    """How often an open trust panel lists the job's files again."""


def mount_console(
    app: FastAPI,
    facade: SchedulerFacade,
    tokens: Tokens,
    settings: ConsoleSettings,
    intake: Intake,
    events: EventHub | None = None,
) -> None:
    """Serve the console at ``/ui/`` on ``app`` (``/`` redirects there); ``intake``: the API's reading of a submit;
    its pages update live from ``events``."""
    sessions = app.state.console_sessions = SessionStore(tokens)
    render = Renderer()
    render.env.globals["job_actions"] = tuple(ACTIONS.values())
    app.mount(f"{PREFIX}/static", StaticFiles(packages=[("learnerkit.scheduler.console", "static")]), name="static")
    app.include_router(_router(facade, sessions, render, settings, intake, events), include_in_schema=False)

    async def page_error(request: Request, exc: Exception) -> Response:
        error = cast(PageError, exc)
        # A refusal (a foreign Host, no CSRF token) shows nothing of the session, not even its tenant.
        session = None if error.status == 403 else sessions.find(request.cookies.get(SESSION_COOKIE))
        return render.page(
            "error.html.j2", status=error.status, title=error.title, message=error.message, session=session
        )

    async def login_required(_request: Request, exc: Exception) -> Response:
        error = cast(LoginRequired, exc)
        query = {"next": error.wanted} | ({"ended": "1"} if error.ended else {})
        return RedirectResponse(f"{PREFIX}/login?{urlencode(query)}", status_code=303)

    app.add_exception_handler(PageError, page_error)
    app.add_exception_handler(LoginRequired, login_required)


def _router(
    facade: SchedulerFacade,
    sessions: SessionStore,
    render: Renderer,
    settings: ConsoleSettings,
    intake: Intake,
    events: EventHub | None,
) -> APIRouter:
    def guard(request: Request) -> None:
        why = refusal(settings.names, request.headers.get("host"), request.headers.get("origin"))
        if why is not None:
            LOGGER.warning("console: refused %s %s: %s", request.method, request.url.path, why)
            raise PageError(403, "Refused", "This address is not the scheduler's own: open the console at its own.")

    root = APIRouter(dependencies=[Depends(guard)])
    router = APIRouter(prefix=PREFIX, route_class=PageRoute)  # guarded as a part of `root`

    @root.get("/")
    async def home() -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    @router.get("/")
    async def start() -> Response:
        return RedirectResponse(f"{PREFIX}/jobs", status_code=303)

    @router.get("/login")
    async def login_page(
        request: Request, next_page: Annotated[str, Query(alias="next")] = "", ended: str = ""
    ) -> Response:
        if sessions.find(request.cookies.get(SESSION_COOKIE)) is not None:
            return RedirectResponse(_local(next_page), status_code=303)
        notice = "Your session has ended; log in again." if ended else ""
        return _login_form(render, settings, next_page=next_page, notice=notice)

    @router.post("/login")
    async def login(request: Request) -> Response:
        try:
            form = await read_form(request)
        except FormError as e:
            return _login_form(render, settings, error=str(e), status=400)
        next_page = form.get("next", "")
        if not csrf_matches(request.cookies.get(LOGIN_COOKIE, ""), form.get("csrf")):
            error = "The log-in form had expired; enter the token again."
            return _login_form(render, settings, next_page=next_page, error=error, status=403)
        token = form.get("token", "").strip()
        if not token:
            return _login_form(render, settings, next_page=next_page, error="Enter your token.", status=400)
        client = request.client.host if request.client else ""
        try:
            tenant, token_id = await run_in_threadpool(sessions.tokens.login, token, client)
        except RateLimitedError as e:
            error = f"Too many failed log-ins; try again in {max(1, round(e.retry_after_s))} s."
            return _login_form(render, settings, next_page=next_page, error=error, status=429)
        except AuthError:
            error = "That token is unknown or revoked."
            return _login_form(render, settings, next_page=next_page, error=error, status=401)
        session = sessions.open(tenant, token_id)
        response = RedirectResponse(_local(next_page), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            session.session_id,
            max_age=int(sessions.ttl_s),
            path="/",
            secure=settings.secure,
            httponly=True,
            samesite="strict",
        )
        response.delete_cookie(LOGIN_COOKIE, path=f"{PREFIX}/login")
        return response

    @router.post("/logout")
    async def logout(request: Request, session: Current) -> Response:
        await changing_form(request, session)
        sessions.close(session.session_id)
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=settings.secure, httponly=True, samesite="strict")
        return response

    @router.get("/jobs")
    async def jobs_page(
        request: Request,
        session: Current,
        status: Annotated[list[str] | None, Query()] = None,
        name: str = "",
        framework: str = "",
        since: str = "",
        until: str = "",
        q: str = "",
        sort: str = "-submitted",
        next_token: Annotated[str, Query(alias="next")] = "",
        limit: Limit = DEFAULT_LIMIT,
    ) -> Response:
        live_after = _position(events)
        statuses = frozenset(s.strip().upper() for s in status or () if s.strip())
        shown: dict[str, Any] = {
            "status": sorted(statuses),
            "name": name,
            "framework": framework,
            "since": since,
            "until": until,
            "q": q,
            "sort": sort,
            "limit": limit,
        }
        error = ""
        page = None
        try:
            query = _job_query(shown, statuses, next_token)
            page = await facade.page_jobs(session.tenant, query)
        except ConfigError as e:
            error = str(e)
        params = {k: v for k, v in shown.items() if v not in ("", [])}
        flips = {column: column if sort != column else f"-{column}" for column in ("name", "status", "submitted")}
        sort_links = {
            column: f"{PREFIX}/jobs?{urlencode(params | {'sort': to}, doseq=True)}" for column, to in flips.items()
        }
        first_link, next_link = page_links(f"{PREFIX}/jobs", params, next_token, (page.next or "") if page else "")
        return render.page(
            "jobs.html.j2",
            status=400 if error else 200,
            session=session,
            title="Jobs",
            page=page,
            error=error,
            shown=shown,
            statuses=views.STATUSES,
            sorts=views.SORTS,
            page_sizes=PAGE_SIZES,
            sort_links=sort_links,
            first_link=first_link,
            next_link=next_link,
            readable_time=views.readable_time,
            live_after=live_after,
        )

    @router.get("/jobs/{job_id}")
    async def job_page(
        job_id: str,
        session: Current,
        attempt: Annotated[int | None, Query(ge=1)] = None,
        learner: Annotated[int, Query(ge=1)] = 1,
        done: str = "",
    ) -> Response:
        live_after = _position(events)
        job = await _job(facade, session, job_id)
        manifest = await facade.manifest(session.tenant, job_id)
        chosen = attempt or (job.attempts[-1].number if job.attempts else None)
        log, log_error = await _log(facade, session, job_id, learner=learner, attempt=chosen, tail=views.LOG_TAIL_LINES)
        files, files_error = await _files(facade, session, job_id)
        return render.page(
            "job.html.j2",
            session=session,
            title=f"{job.name} ({job.job_id})",
            job=job,
            done=done_notice(done),
            reason=views.status_reason(job),
            timeline=views.timeline(job),
            manifest=manifest,
            resources=views.resources(manifest),
            attempt=log.attempt if log else chosen,
            learner=learner,
            log=log,
            log_text=log.text if log else "",
            log_error=log_error,
            files=files,
            files_error=files_error,
            readable_time=views.readable_time,
            human_size=views.human_size,
            quote=quote,
            live_after=live_after,
        )

    @router.get("/jobs/{job_id}/log")
    async def log_range(
        job_id: str,
        session: Current,
        attempt: Annotated[int, Query(ge=1)],
        learner: Annotated[int, Query(ge=1)] = 1,
        end: Annotated[int | None, Query(ge=0, description="where the range ends; none: the log's start")] = None,
    ) -> Response:
        job = await _job(facade, session, job_id)
        end = views.LOG_RANGE_BYTES if end is None else end
        offset = max(0, end - views.LOG_RANGE_BYTES)
        log, log_error = await _log(
            facade, session, job_id, learner=learner, attempt=attempt, offset=offset, length=end - offset
        )
        return render.page(
            "log.html.j2",
            session=session,
            title=f"{job.name} ({job.job_id}): log",
            job=job,
            attempt=attempt,
            learner=learner,
            log=log,
            log_error=log_error,
            range_bytes=views.LOG_RANGE_BYTES,
        )

    @router.get("/jobs/{job_id}/log.txt")
    async def log_download(
        job_id: str,
        session: Current,
        attempt: Annotated[int, Query(ge=1)],
        learner: Annotated[int, Query(ge=1)] = 1,
    ) -> Response:
        try:
            stream = await facade.logs(session.tenant, job_id, learner_id=learner, attempt=attempt)
        except UnknownJobError as e:
            raise not_found(job_id) from e
        except ConfigError as e:
            raise PageError(400, "No such log", str(e)) from e
        name = f"{job_id}-attempt-{attempt}-learner-{learner}.log"
        return _download(stream.chunks, stream.size, name, "text/plain; charset=utf-8")

    @router.get("/jobs/{job_id}/files/{path:path}")
    async def file_download(job_id: str, path: str, session: Current) -> Response:
        try:
            stream = await facade.open_output(session.tenant, job_id, path)
        except UnknownJobError as e:
            raise not_found(job_id) from e
        except UnknownFileError as e:
            raise PageError(404, "Not found", f"Job {job_id} stored no file {path!r}.") from e
        return _download(stream.chunks, stream.size, path.rsplit("/", 1)[-1], "application/octet-stream")

    add_submit_routes(router, facade, render, intake)
    add_action_routes(router, facade, render)

    router.include_router(series_routes(session_of))

    @router.get("/events")
    async def event_source(
        request: Request,
        session: Current,
        after: str | None = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> Response:
        """The session's tenant's events for live.js (`/v1/events` with the session cookie)."""
        if events is None:
            raise PageError(404, "Not found", "This scheduler serves no event stream.")
        address = request.client.host if request.client else ""
        cookie = request.cookies.get(SESSION_COOKIE)
        try:
            return event_stream(
                events,
                session.tenant,
                address,
                resume_point(last_event_id, after),
                still_allowed=lambda: sessions.find(cookie) is not None,
            )
        except TooManyStreams as e:
            raise PageError(429, "Too many streams", str(e)) from e

    add_compare_routes(router, facade, render)
    add_queue_routes(router, facade, render, events)
    add_cluster_routes(router, facade, render)
    add_sweep_routes(router, facade, render, events)
    add_trust_routes(router, facade, render, TrustChecker(facade, settings.keys, recheck_s=settings.trust_recheck_s))
    add_image_routes(router, render)

    @router.get("/{unknown:path}")
    async def no_such_page(unknown: str) -> Response:
        raise PageError(404, "Not found", f"The console has no page {unknown!r}.")

    root.include_router(router)
    return root


def _position(events: EventHub | None) -> str:
    return str(events.latest) if events is not None and events.ready.is_set() else ""


def _login_form(
    render: Renderer,
    settings: ConsoleSettings,
    *,
    next_page: str = "",
    notice: str = "",
    error: str = "",
    status: int = 200,
) -> Response:
    csrf = render.new_token()
    response = render.page(
        "login.html.j2",
        status=status,
        title="Log in",
        session=None,
        csrf=csrf,
        next_page=next_page,
        notice=notice,
        error=error,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        csrf,
        max_age=3600,
        path=f"{PREFIX}/login",
        secure=settings.secure,
        httponly=True,
        samesite="strict",
    )
    return response


def _job_query(shown: dict[str, Any], statuses: frozenset[str], next_token: str) -> JobQuery:
    """The list's form as the facade's query; `ConfigError` naming the field that is wrong."""
    sort = str(shown["sort"])
    if sort not in views.SORTS:
        raise ConfigError(f"sort: one of {', '.join(views.SORTS)}; got {sort!r}")
    return JobQuery(
        limit=int(shown["limit"]),
        next=next_token or None,
        sort=sort.removeprefix("-"),
        descending=sort.startswith("-"),
        statuses=statuses,
        name=str(shown["name"]).strip() or None,
        framework=str(shown["framework"]).strip() or None,
        since=parse_instant("since", str(shown["since"])),
        until=parse_instant("until", str(shown["until"])),
        search=str(shown["q"]).strip() or None,
    )


def _local(next_page: str) -> str:
    """Where to go after log-in: the page asked for when it is one of the console's to read (not the log-in or
    log-out), else the job list."""
    own = next_page.startswith(f"{PREFIX}/") and not next_page.startswith((f"{PREFIX}//", f"{PREFIX}/log"))
    if own and "\\" not in next_page:
        return next_page
    return f"{PREFIX}/jobs"


async def _job(facade: SchedulerFacade, session: Session, job_id: str) -> JobView:
    try:
        return await facade.get(session.tenant, job_id)
    except UnknownJobError as e:
        raise not_found(job_id) from e


@dataclass(frozen=True)
class LogPart:
    text: str
    offset: int
    next_offset: int
    log_size: int
    attempt: int
    finished: bool


async def _log(
    facade: SchedulerFacade,
    session: Session,
    job_id: str,
    *,
    learner: int,
    attempt: int | None,
    tail: int | None = None,
    offset: int = 0,
    length: int | None = None,
) -> tuple[LogPart | None, str]:
    """The part of the log asked for, or why there is none to show."""
    if attempt is None:
        return None, "The job has not started yet: it has no log."
    try:
        stream: LogStream = await facade.logs(
            session.tenant, job_id, learner_id=learner, attempt=attempt, tail=tail, offset=offset, length=length
        )
        data = await run_in_threadpool(stream.read)
    except UnknownJobError as e:
        raise not_found(job_id) from e
    except (ConfigError, JobStateError) as e:
        return None, str(e)
    except LearnerkitError as e:
        LOGGER.warning("console: the log of %s cannot be read: %s", job_id, e)
        return None, "The log cannot be read now: the job's object store did not answer."
    text = data.decode("utf-8", errors="replace")
    return LogPart(text, stream.offset, stream.next_offset, stream.log_size, stream.attempt, stream.finished), ""


async def _files(facade: SchedulerFacade, session: Session, job_id: str) -> tuple[list[StoredFile], str]:
    try:
        return await facade.outputs(session.tenant, job_id), ""
    except UnknownJobError as e:
        raise not_found(job_id) from e
    except JobStateError as e:
        return [], str(e)
    except LearnerkitError as e:
        LOGGER.warning("console: the files of %s cannot be listed: %s", job_id, e)
        return [], "The stored files cannot be listed now: the job's object store did not answer."


def _download(chunks: Iterator[bytes], size: int, name: str, media_type: str) -> Response:
    headers = {
        "Content-Length": str(size),
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
        "X-Content-Type-Options": "nosniff",
    }
    return StreamingResponse(chunks, media_type=media_type, headers=headers)
