"""Console sessions end at their expiry, at log-out and when their token leaves the tokens file."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit.scheduler.api.auth import TokenStore, add_token, revoke
from learnerkit.scheduler.console.origin import host_name, own_names, refusal
from learnerkit.scheduler.console.sessions import SessionStore, csrf_matches
from learnerkit.scheduler.errors import AuthError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_lives_until_it_expires_or_logs_out(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    clock = Clock()
    store = SessionStore(TokenStore(path), ttl_s=60, clock=clock)
    tenant, token_id = store.tokens.login(token, "127.0.0.1")
    session = store.open(tenant, token_id)
    assert store.find(session.session_id) == session
    clock.now += 59
    assert store.find(session.session_id) == session
    clock.now += 1
    assert store.find(session.session_id) is None, "expired"
    again = store.open(tenant, token_id)
    store.close(again.session_id)
    assert store.find(again.session_id) is None
    assert store.find(None) is None and store.find("made-up") is None


def test_revoking_the_token_ends_its_sessions_and_no_others(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    first, second = add_token(path, "team-a"), add_token(path, "team-a")
    store = SessionStore(TokenStore(path))
    one = store.open(*store.tokens.login(first, ""))
    two = store.open(*store.tokens.login(second, ""))
    revoke(path, token_id=first.split("_")[1])
    assert store.find(one.session_id) is None
    assert store.find(two.session_id) == two
    with pytest.raises(AuthError, match="unknown or revoked token"):
        store.tokens.login(first, "")


def test_the_csrf_token_must_match_exactly() -> None:
    assert csrf_matches("abc", "abc")
    assert not csrf_matches("abc", "abd")
    assert not csrf_matches("abc", "")
    assert not csrf_matches("abc", None)


@pytest.mark.parametrize(
    ("host", "origin", "refused"),
    [
        ("127.0.0.1:8080", None, False),
        ("localhost:8080", "http://localhost:8080", False),
        ("[::1]:8080", None, False),
        ("sched.lab:8443", "https://sched.lab:8443", False),
        ("attacker.example:8080", None, True),
        ("127.0.0.1:8080", "http://attacker.example", True),
        ("127.0.0.1:8080", "null", True),
        ("localhost:8080", "http://127.0.0.1:8080", True),
        (None, None, True),
    ],
)
def test_only_the_schedulers_own_host_and_origin_pass(host: str | None, origin: str | None, refused: bool) -> None:
    names = own_names("0.0.0.0", ("sched.lab",))
    assert "0.0.0.0" not in names
    assert (refusal(names, host, origin) is not None) is refused


def test_host_names_lose_their_port() -> None:
    assert [host_name(h) for h in ("Example.org:80", "[::1]:8080", "::1", "10.0.0.1")] == [
        "example.org",
        "::1",
        "::1",
        "10.0.0.1",
    ]
