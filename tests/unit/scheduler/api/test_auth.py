"""Tokens per tenant: stored as salted scrypt hashes in a 0600 file, revocable, cached once verified."""

from __future__ import annotations

import json
import stat
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from learnerkit.scheduler.api import auth
from learnerkit.scheduler.api.auth import TokenStore, add_token, read_tokens, revoke
from learnerkit.scheduler.errors import AuthError, RateLimitedError, TokensFileError


def test_the_file_keeps_salted_hashes_never_the_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    first, second = add_token(path, "team-a"), add_token(path, "team-a")
    text = path.read_text()
    secret = first.split("_", 2)[2]
    assert first not in text and secret not in text
    entries = json.loads(text)["tokens"]
    assert len(entries) == 2
    salts = {entry["salt"] for entry in entries.values()}
    assert len(salts) == 2, "each token has its own salt"
    assert {entry["tenant"] for entry in entries.values()} == {"team-a"}
    assert first != second


def test_the_file_is_private_and_written_atomically(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "team-a")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    add_token(path, "team-b")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tokens.json.lock", "tokens.json"], "no temp file left"


def test_a_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "team-a")
    path.chmod(0o644)
    with pytest.raises(TokensFileError, match="chmod 600"):
        TokenStore(path)


def test_a_missing_file_fails_at_start_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(TokensFileError, match="token add"):
        TokenStore(tmp_path / "absent.json")


@pytest.mark.parametrize("tenant", ["", "a b", "../x", "-x", "t" * 65])
def test_bad_tenant_names_are_refused(tmp_path: Path, tenant: str) -> None:
    with pytest.raises(TokensFileError, match="tenant"):
        add_token(tmp_path / "tokens.json", tenant)


def test_authenticate_returns_the_tenant(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token_a, token_b = add_token(path, "team-a"), add_token(path, "team-b")
    store = TokenStore(path)
    assert store.authenticate(f"Bearer {token_a}") == "team-a"
    assert store.authenticate(f"bearer  {token_b} ") == "team-b"


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "lkt_0123456789ab_xxxxxxxxxxxxxxxxxxxxxxxx", "Bearer nope"],
)
def test_missing_or_malformed_headers_are_refused(tmp_path: Path, header: str | None) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "team-a")
    with pytest.raises(AuthError):
        TokenStore(path).authenticate(header)


def test_a_wrong_secret_with_a_known_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(AuthError, match="unknown or revoked"):
        TokenStore(path).authenticate(f"Bearer {forged}")


def test_verified_tokens_skip_scrypt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    store = TokenStore(path)
    calls: list[int] = []
    real = auth._scrypt

    def counting(*args: object) -> bytes:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(auth, "_scrypt", counting)
    for _ in range(5):
        assert store.authenticate(f"Bearer {token}") == "team-a"
    assert len(calls) == 1


def test_revoke_by_tenant_and_by_id_takes_effect_in_a_running_store(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    a1, a2, b = add_token(path, "team-a"), add_token(path, "team-a"), add_token(path, "team-b")
    store = TokenStore(path)
    for token in (a1, a2, b):
        store.authenticate(f"Bearer {token}")
    b_id = b.split("_")[1]
    assert revoke(path, token_id=b_id) == [b_id]
    with pytest.raises(AuthError):
        store.authenticate(f"Bearer {b}")
    assert sorted(revoke(path, tenant="team-a")) == sorted(t.split("_")[1] for t in (a1, a2))
    for token in (a1, a2):
        with pytest.raises(AuthError):
            store.authenticate(f"Bearer {token}")
    assert read_tokens(path) == {}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_revoke_takes_a_tenant_or_an_id(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "team-a")
    with pytest.raises(TokensFileError):
        revoke(path)
    with pytest.raises(TokensFileError):
        revoke(path, tenant="team-a", token_id="0123456789ab")
    assert revoke(path, tenant="nobody") == []


def test_a_corrupt_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text('{"version": 1, "tokens": {"x": {"tenant": "a"}}}')
    path.chmod(0o600)
    with pytest.raises(TokensFileError, match="not a learnerkit tokens file"):
        read_tokens(path)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def forge(token: str) -> str:
    """The same token id with a wrong secret: every check of it costs a scrypt."""
    return token[:17] + ("A" if token[17] != "A" else "B") + token[18:]


def test_failures_are_bounded_per_token_id_and_address_and_verified_tenants_stay_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.json"
    token, other = add_token(path, "team-a"), add_token(path, "team-b")
    clock = Clock()
    store = TokenStore(path, clock=clock)
    assert store.authenticate(f"Bearer {token}") == "team-a"
    calls: list[int] = []
    real = auth._scrypt
    monkeypatch.setattr(auth, "_scrypt", lambda *args: calls.append(1) or real(*args))
    outcomes = []
    for _ in range(12):
        try:
            store.authenticate(f"Bearer {forge(token)}", client="10.0.0.66")
        except RateLimitedError as e:
            outcomes.append(f"429 after {e.retry_after_s:.0f} s")
        except AuthError:
            outcomes.append("401")
    assert outcomes == ["401"] * 5 + ["429 after 12 s"] * 7
    assert calls == [], "a wrong secret fails the quick check: no scrypt"
    assert store.cached(f"Bearer {token}") == "team-a", "the verified tenant still pays one HMAC"
    assert store.authenticate(f"Bearer {other}", client="10.0.0.66") == "team-b", "other token ids are not affected"
    with pytest.raises(AuthError):  # the same token id from another address has its own budget
        store.authenticate(f"Bearer {forge(token)}", client="10.0.0.67")
    clock.now += 12
    with pytest.raises(AuthError):
        store.authenticate(f"Bearer {forge(token)}", client="10.0.0.66")


def test_wrong_secrets_never_lock_the_owner_out(tmp_path: Path) -> None:
    """D6: knowing a token id is not enough to lock its tenant out, even before the owner's token is cached."""
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    store = TokenStore(path, clock=Clock())
    for _ in range(auth.FAILURES_PER_MINUTE["token_at_client"] + 3):
        with pytest.raises((AuthError, RateLimitedError)):
            store.authenticate(f"Bearer {forge(token)}", client="203.0.113.7")
    with pytest.raises(RateLimitedError):
        store.authenticate(f"Bearer {forge(token)}", client="203.0.113.7")
    assert store.cached(f"Bearer {token}") is None, "the owner's token was not verified before"
    assert store.authenticate(f"Bearer {token}", client="10.0.0.1") == "team-a"


def test_strangers_behind_the_owners_address_never_lock_the_owner_out(tmp_path: Path) -> None:
    """The NAT case: 50 wrong tokens from one address, half with the owner's token id, then the owner's token, sent
    for the first time since the start, from that address: accepted."""
    path = tmp_path / "tokens.json"
    token, other = add_token(path, "team-a"), add_token(path, "team-b")
    store = TokenStore(path, clock=Clock())
    answers = []
    for n in range(50):
        wrong = guess(token, n) if n % 2 else guess(other, n)
        try:
            store.authenticate(f"Bearer {wrong}", client="192.0.2.1")
        except RateLimitedError:
            answers.append("429")
        except AuthError:
            answers.append("401")
    assert answers.count("429") >= 30, "the address is limited"
    assert store.cached(f"Bearer {token}") is None, "the owner's token was not verified before"
    assert store.authenticate(f"Bearer {token}", client="192.0.2.1") == "team-a"
    assert store.authenticate(f"Bearer {other}", client="192.0.2.1") == "team-b"


def test_guessing_is_still_throttled_and_costs_no_scrypt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100 wrong secrets for one token id from one address: 5 answered 401, the rest 429 with Retry-After, none of
    them a scrypt; the budget comes back with time. (Guesses over many ids: the address's own budget, below.)"""
    path = tmp_path / "tokens.json"
    tokens = [add_token(path, "team-a")]
    clock = Clock()
    store = TokenStore(path, clock=clock)
    calls: list[int] = []
    real = auth._scrypt
    monkeypatch.setattr(auth, "_scrypt", lambda *args: calls.append(1) or real(*args))
    answers = []
    for n in range(100):
        try:
            store.authenticate(f"Bearer {guess(tokens[0], n)}", client="198.51.100.9")
        except RateLimitedError as e:
            answers.append(f"429 after {e.retry_after_s:.0f} s")
        except AuthError:
            answers.append("401")
    assert answers == ["401"] * 5 + ["429 after 12 s"] * 95
    assert calls == []
    clock.now += 12
    with pytest.raises(AuthError) as one_more:
        store.authenticate(f"Bearer {guess(tokens[0], 100)}", client="198.51.100.9")
    assert not isinstance(one_more.value, RateLimitedError), "one failure's worth came back in 12 s"


def test_an_entry_without_a_quick_check_keeps_the_earlier_rule(tmp_path: Path) -> None:
    """A tokens file written before the quick check: failures are refused past the limits before the scrypt."""
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    doc = json.loads(path.read_text())
    for entry in doc["tokens"].values():
        del entry["quick_check"]
    path.write_text(json.dumps(doc))
    store = TokenStore(path, clock=Clock())
    assert store._entries[token.split("_")[1]].quick_check is None
    for n in range(auth.FAILURES_PER_MINUTE["token_at_client"]):
        with pytest.raises(AuthError):
            store.authenticate(f"Bearer {guess(token, n)}", client="192.0.2.7")
    with pytest.raises(RateLimitedError):
        store.authenticate(f"Bearer {token}", client="192.0.2.7")
    assert store.authenticate(f"Bearer {token}", client="192.0.2.8") == "team-a"


def test_parallel_wrong_secrets_are_counted_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 wrong secrets at once: exactly the limit's 5 answered 401, and none costs a scrypt."""
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    store = TokenStore(path, clock=Clock())
    calls: list[int] = []
    real = auth._scrypt
    monkeypatch.setattr(auth, "_scrypt", lambda *args: calls.append(1) or real(*args))
    headers = [f"Bearer {guess(token, n)}" for n in range(40)]
    outcomes = in_parallel([partial(store.authenticate, header, client="198.51.100.1") for header in headers])
    assert sorted(outcomes) == ["401"] * 5 + ["429"] * 35
    assert calls == []


def test_a_wrong_secret_that_passes_the_quick_check_is_counted_after_its_scrypt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One wrong guess in 2**32 passes the quick check: its scrypt runs, then it counts as a failure."""
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    store = TokenStore(path, clock=Clock())
    monkeypatch.setattr(auth.TokenEntry, "passes_quick_check", lambda _self, _token: True)
    for n in range(auth.FAILURES_PER_MINUTE["token_at_client"]):
        with pytest.raises(AuthError) as failed:
            store.authenticate(f"Bearer {guess(token, n)}", client="192.0.2.9")
        assert not isinstance(failed.value, RateLimitedError)
    with pytest.raises(RateLimitedError):
        store.authenticate(f"Bearer {guess(token, 99)}", client="192.0.2.9")
    assert store.authenticate(f"Bearer {token}", client="192.0.2.9") == "team-a"


def test_a_correct_token_sent_in_parallel_is_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's first requests at once: one scrypt, and none of them is counted as a failure."""
    path = tmp_path / "tokens.json"
    token = add_token(path, "team-a")
    store = TokenStore(path, clock=Clock())
    calls: list[int] = []
    real = auth._scrypt
    monkeypatch.setattr(auth, "_scrypt", lambda *args: calls.append(1) or real(*args))
    outcomes = in_parallel([lambda: store.authenticate(f"Bearer {token}", client="10.0.0.1") for _ in range(12)])
    assert outcomes == ["team-a"] * 12
    assert len(calls) == 1


def guess(token: str, n: int) -> str:
    """The same token id with the n-th wrong secret."""
    return token[:17] + f"wrong{n:04d}".ljust(len(token) - 17, "x")


def in_parallel(attempts: list[Callable[[], str]]) -> list[str]:
    """Run every attempt at once (on threads, released together); each one's tenant, or 401 or 429."""
    start = threading.Barrier(len(attempts))
    outcomes: list[str] = []

    def run(attempt: Callable[[], str]) -> None:
        start.wait()
        try:
            outcomes.append(attempt())
        except RateLimitedError:
            outcomes.append("429")
        except AuthError:
            outcomes.append("401")

    threads = [threading.Thread(target=run, args=(attempt,)) for attempt in attempts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_failures_are_bounded_per_client_address(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    tokens = [add_token(path, f"team-{n}") for n in range(21)]
    clock = Clock()
    store = TokenStore(path, clock=clock)
    for token in tokens[:20]:
        with pytest.raises(AuthError):
            store.authenticate(f"Bearer {forge(token)}", client="10.0.0.9")
    with pytest.raises(RateLimitedError):
        store.authenticate(f"Bearer {forge(tokens[20])}", client="10.0.0.9")
    with pytest.raises(AuthError) as elsewhere:
        store.authenticate(f"Bearer {forge(tokens[20])}", client="10.0.0.10")
    assert not isinstance(elsewhere.value, RateLimitedError)
    assert store.authenticate(f"Bearer {tokens[20]}", client="10.0.0.9") == "team-20", "valid: always accepted"
    clock.now += 3
    with pytest.raises(AuthError) as later:
        store.authenticate(f"Bearer {forge(tokens[19])}", client="10.0.0.9")
    assert not isinstance(later.value, RateLimitedError), "one failure's worth came back in 3 s"


def test_a_tokens_role_is_kept_and_an_entry_without_one_is_a_tenants(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    ops, tenant = add_token(path, "ops", "operator"), add_token(path, "team-a")
    store = TokenStore(path)
    ops_id, tenant_id = (token.split("_")[1] for token in (ops, tenant))
    assert (store.is_operator(ops_id), store.is_operator(tenant_id)) == (True, False)
    doc = json.loads(path.read_text())
    del doc["tokens"][ops_id]["role"]
    path.write_text(json.dumps(doc))
    assert read_tokens(path)[ops_id].role == "tenant", "written before roles existed: a tenant's"
    doc["tokens"][ops_id]["role"] = "admin"
    path.write_text(json.dumps(doc))
    with pytest.raises(TokensFileError, match=f"token {ops_id}: role: one of tenant, operator; got 'admin'"):
        read_tokens(path)
    with pytest.raises(TokensFileError, match="role 'root'"):
        add_token(tmp_path / "other.json", "ops", "root")
