"""A console form's fields from a small urlencoded body, read only while it stays small."""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import Request

MAX_FORM_BYTES = 16 * 1024
"""A console form holds a token and a few short fields."""


class FormError(Exception):
    pass


async def read_form(request: Request) -> dict[str, str]:
    """Each field's last value (none for an empty body); `FormError` for another content type, a body over
    `MAX_FORM_BYTES` or one that is not UTF-8."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if not media_type and request.headers.get("content-length", "0") == "0":
        return {}  # no form at all: a change without it is then refused for its missing CSRF token
    if media_type != "application/x-www-form-urlencoded":
        raise FormError("send the form as application/x-www-form-urlencoded")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormError(f"the form is over {MAX_FORM_BYTES} bytes")
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError as e:
        raise FormError("the form is not UTF-8") from e
