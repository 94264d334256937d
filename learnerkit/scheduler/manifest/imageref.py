"""Image references as the registry's distribution spec writes them: ``[host[:port]/]path[:tag][@digest]``.

`job validate --image` and `job submit --image` (and the API's ``image`` field) check a reference here, so
a typo is refused naming the option before anything runs.
"""

from __future__ import annotations

import re

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)"
_HOST = re.compile(rf"{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?")
_REPOSITORY = re.compile(
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
MAX_NAME = 255
"""The repository name (host and path) may have at most this many characters."""


def reference_problem(reference: str) -> str | None:
    """Why ``reference`` is not a valid image reference, or None when it is. As the engine reads it, the first
    component is a registry host only when it has a ``.`` or a ``:`` or is ``localhost``."""
    first, slash, rest = reference.partition("/")
    has_host = bool(slash) and ("." in first or ":" in first or first == "localhost")
    host_ok = _HOST.fullmatch(first) is not None if has_host else True
    if not host_ok or not _REPOSITORY.fullmatch(rest if has_host else reference):
        return (
            f"{reference!r} is not an image reference: expected [registry[:port]/]name[:tag][@sha256:digest] "
            "with a lower-case name, e.g. registry.local/learnerkit/pytorch:2.13-cpu-py3.11"
        )
    name = reference.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    if len(name) > MAX_NAME:
        return f"{reference[:40]!r}...: the name is longer than {MAX_NAME} characters"
    return None
