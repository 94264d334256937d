"""Who a console request is and what it may change: the session behind it, the CSRF token of a form that changes
something, and the error pages it leads to (`PageError`, `LoginRequired`)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute

from learnerkit.scheduler.console.forms import FormError, read_form
from learnerkit.scheduler.console.sessions import Session, SessionStore, csrf_matches
from learnerkit.scheduler.errors import query_problems

PREFIX = "/ui"
SESSION_COOKIE = "learnerkit_session"
CSRF_REFUSAL = "The form's CSRF token is missing or wrong; reload the page and retry."


class LoginRequired(Exception):
    def __init__(self, wanted: str, ended: bool) -> None:
        super().__init__(wanted)
        self.wanted = wanted
        self.ended = ended
        """The browser sent a session cookie that is no longer a session (expired, revoked)."""


class PageError(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


class PageRoute(APIRoute):
    """A console route whose bad query parameter (``limit=abc``, ``attempt=0``) is the console's error page in the
    words and status the API answers (422: docs/api.md, "Errors"), not the API's JSON; a page's script, which asks
    for JSON (`static/fetchjson.js`), still gets the JSON it reads."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as e:
                if "application/json" in request.headers.get("accept", ""):
                    raise
                raise PageError(422, "Bad address", query_problems(e.errors())) from e

        return page_handler


def session_of(request: Request) -> Session:
    """The request's live session; `LoginRequired` (a redirect to the login, keeping the page) without one."""
    sessions: SessionStore = request.app.state.console_sessions
    cookie = request.cookies.get(SESSION_COOKIE)
    session = sessions.find(cookie)
    if session is None:
        wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(wanted, ended=cookie is not None)
    return session


Current = Annotated[Session, Depends(session_of)]


def check_csrf(session: Session, sent: str | None) -> None:
    """`PageError` 403 unless ``sent`` is the session's CSRF token."""
    if not csrf_matches(session.csrf, sent):
        raise PageError(403, "Refused", CSRF_REFUSAL)


async def changing_form(request: Request, session: Session) -> dict[str, str]:
    """The form of a request that changes something, refused (403) without the session's CSRF token."""
    try:
        form = await read_form(request)
    except FormError as e:
        raise PageError(400, "Bad request", str(e)) from e
    check_csrf(session, form.get("csrf"))
    return form


def not_found(job_id: str) -> PageError:
    # The same words for another tenant's job and for none: a tenant cannot learn that it exists.
    return PageError(404, "Not found", f"There is no job {job_id!r}.")
