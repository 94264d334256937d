"""Refuse console requests that name another site (DNS rebinding, cross-site forms): the ``Host`` must be one of
the scheduler's own names, and an ``Origin``, when the browser sends one, that same scheduler."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def own_names(bind_host: str, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The names the scheduler answers to: the loopback names, the address it listens on (unless a wildcard)
    and ``extra`` (its certificate's names, `--console-host`)."""
    names = set(LOOPBACK_NAMES) | {name.lower() for name in extra if name}
    if bind_host and not _is_wildcard(bind_host):
        names.add(bind_host.lower())
    return frozenset(names)


def host_name(host_header: str) -> str:
    """``example.org:8080`` -> ``example.org``; ``[::1]:8080`` -> ``::1``."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else ""
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def refusal(names: frozenset[str], host: str | None, origin: str | None) -> str | None:
    """Why the request is refused, or None when its Host (and Origin) are the scheduler's own."""
    if host is None or host_name(host) not in names:
        return f"Host {host!r} is not this scheduler's"
    if origin is not None:
        parts = urlsplit(origin)
        if parts.hostname is None or parts.hostname.lower() not in names or parts.netloc.lower() != host.lower():
            return f"Origin {origin!r} is not this scheduler's"
    return None


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False
