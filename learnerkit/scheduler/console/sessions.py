"""Console sessions, kept in the scheduler's memory: the browser holds only a random session id (an HttpOnly
cookie). A session keeps its tenant and the id of the token it logged in with, never the token, and ends when
that token is revoked (the tokens file no longer holds its id), when it expires, or at log-out. A restart of the
scheduler ends every session: its users log in again."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

SESSION_TTL_S = 8 * 3600.0
"""A session lasts this long from its log-in, whatever it does (the cookie's Max-Age says the same)."""
MAX_SESSIONS = 10_000
"""Sessions held at once; past it the oldest is dropped (a log-in flood cannot fill the memory)."""


class Tokens(Protocol):
    """What the console needs of the API's token store (`learnerkit.scheduler.api.auth.TokenStore`)."""

    def login(self, token: str, client: str) -> tuple[str, str]:
        """(tenant, token id); `AuthError` or `RateLimitedError` as for a bearer token."""

    def tenant_of_id(self, token_id: str) -> str | None:
        """The token's tenant while the tokens file holds it."""

    def is_operator(self, token_id: str) -> bool:
        """Whether the token's role, while the tokens file holds it, is the operator's."""


@dataclass(frozen=True)
class Session:
    session_id: str
    tenant: str
    token_id: str
    csrf: str
    """Sent back in every form that changes something (`SessionStore.csrf_matches`)."""
    expires_at: float
    """On the store's clock."""
    operator: bool = False
    """The token's role is the operator's: the Cluster view opens to it, and to no tenant."""


class SessionStore:
    def __init__(self, tokens: Tokens, *, ttl_s: float = SESSION_TTL_S, clock: Callable[[], float] = time.time) -> None:
        self.tokens = tokens
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def open(self, tenant: str, token_id: str) -> Session:
        session = Session(
            session_id=secrets.token_urlsafe(32),
            tenant=tenant,
            token_id=token_id,
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self.ttl_s,
            operator=self.tokens.is_operator(token_id),
        )
        with self._lock:
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[session.session_id] = session
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live session of this id; None when there is none, it expired or its token was revoked."""
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expires_at <= self._clock() or self.tokens.tenant_of_id(session.token_id) != session.tenant:
            self.close(session_id)
            return None
        return session

    def close(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)


def csrf_matches(expected: str, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(expected.encode(), (sent or "").encode())
