"""Jinja2 templates in, HTML responses out, with the console's security headers on every page."""

from __future__ import annotations

import secrets
from typing import Any

import jinja2
from fastapi.responses import HTMLResponse

from learnerkit import __version__

SECURITY_HEADERS = {
    # The scheduler's own scripts and connections alone (live.js's event stream and fetches); nothing from
    # elsewhere, no inline script, no framing, forms post only here.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; "
        "form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Renderer:
    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("learnerkit.scheduler.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals["version"] = __version__

    def page(self, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        """``live_after``: the event position the page's data is current at (taken before reading it), from
        which live.js follows; empty: the page does not update."""
        html = self.env.get_template(template).render(**({"live_after": ""} | context))
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(32)
