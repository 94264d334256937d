"""HSTS: an answer over HTTPS tells the browser (the console) to use HTTPS alone for this host for a year.

A plain ASGI wrapper, not Starlette's ``BaseHTTPMiddleware``, so streamed answers (logs, files) stay streamed.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HSTS_HEADER = (b"strict-transport-security", b"max-age=31536000")


class StrictTransportSecurity:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("scheme") != "https":
            await self.app(scope, receive, send)
            return

        async def send_with_hsts(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), HSTS_HEADER]}
            await send(message)

        await self.app(scope, receive, send_with_hsts)
