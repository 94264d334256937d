"""Bearer tokens per tenant, kept as salted scrypt hashes in a JSON tokens file (mode 0600).

A token reads ``lkt_<id>_<secret>``: the public ``id`` finds the one entry to check, so a request costs at most
one scrypt, and an unknown id costs none. A verified token is remembered in memory under an HMAC of the token
(with a key that never leaves the process), so later requests pay one SHA-256. The file is re-read when it
changes on disk, which makes ``token revoke`` take effect in a running server without a restart.

A token is checked in two steps. Its entry keeps, beside the scrypt hash, a quick check: 4 bytes of a SHA-256
of the salt and the token (`QUICK_CHECK_BYTES`). A token that fails it is wrong, known in a microsecond and
without a scrypt; a token that passes it (the right one, or one wrong guess in 2**32) is proven by the scrypt.

The login rule (docs/security.md): **a valid token is always accepted; limits count failures only.** A failed
check is counted per token id and client address together and per client address (`FAILURES_PER_MINUTE`);
past either it is answered 429 (`RateLimitedError`) instead of 401. Since no rule can refuse a client without
first reading its token, this is the only rule under which strangers behind one address (a NAT, a proxy) or a
stranger who knows a token's id never lock its owner out: the owner's token passes the quick check and the
scrypt whatever the address has failed. What it costs a guesser is unchanged in what matters: a token holds
256 random bits, and wrong guesses cost the scheduler no scrypt, so neither guessing nor a flood of guesses
burns its CPU; at most `SCRYPTS_AT_ONCE` scrypts run at a time.

An entry written before the quick check existed (no ``quick_check`` in the file) keeps the earlier rule: its
failure is counted before its scrypt and the check refused past the limits; `token add` writes entries with one.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from learnerkit.scheduler.api.ratelimit import Clock, RateLimiter
from learnerkit.scheduler.errors import AuthError, RateLimitedError, TokensFileError

TOKEN_PREFIX = "lkt_"  # noqa: S105 (a prefix that marks learnerkit tokens, not a secret)
FILE_VERSION = 1
SCRYPT_N = 2**14
"""scrypt's cost: 16 MiB and about 50 ms per check; stored per entry, so raising it later keeps old tokens."""
SCRYPT_R = 8
SCRYPT_P = 1
FAILURES_PER_MINUTE = {"token_at_client": 5, "client": 20}
"""Failed checks a token id from one client address, and a client address, may have per minute (and at once)
before further failures are answered 429 instead of 401."""
SCRYPTS_AT_ONCE = 2
QUICK_CHECK_BYTES = 4
"""The quick check's length: a wrong token passes it once in 2**32, and the file tells 32 of a token's 256 bits."""
_QUICK_CHECK_LABEL = b"learnerkit token quick check\0"
TENANT_ROLE = "tenant"
OPERATOR_ROLE = "operator"
ROLES = (TENANT_ROLE, OPERATOR_ROLE)
"""A token's role: a tenant's sees its own jobs; an operator's sees them too and, in the console, the cluster."""
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TOKEN = re.compile(r"^lkt_([0-9a-f]{12})_([A-Za-z0-9_-]{20,})$")


@dataclass(frozen=True)
class TokenEntry:
    token_id: str
    tenant: str
    created_at: str
    salt: bytes
    digest: bytes
    n: int = SCRYPT_N
    r: int = SCRYPT_R
    p: int = SCRYPT_P
    quick_check: bytes | None = None
    """None in entries written before it existed."""
    role: str = TENANT_ROLE
    """`ROLES`; entries written before roles existed are a tenant's."""

    def matches(self, token: str) -> bool:
        candidate = _scrypt(token, self.salt, self.n, self.r, self.p)
        return hmac.compare_digest(candidate, self.digest)

    def passes_quick_check(self, token: str) -> bool:
        """False: the token is wrong. True: it may be right, and only `matches` says."""
        return self.quick_check is None or hmac.compare_digest(_quick_check(token, self.salt), self.quick_check)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "tenant": self.tenant,
            "created_at": self.created_at,
            "salt": self.salt.hex(),
            "scrypt": {"n": self.n, "r": self.r, "p": self.p},
            "hash": self.digest.hex(),
            "role": self.role,
        }
        if self.quick_check is not None:
            doc["quick_check"] = self.quick_check.hex()
        return doc


def _scrypt(token: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(token.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r, dklen=32)


def _quick_check(token: str, salt: bytes) -> bytes:
    return hashlib.sha256(_QUICK_CHECK_LABEL + salt + token.encode()).digest()[:QUICK_CHECK_BYTES]


def add_token(path: Path, tenant: str, role: str = TENANT_ROLE) -> str:
    """Create a token for ``tenant`` and return it: the only time it is shown, since the file keeps its hash."""
    if not _TENANT.match(tenant):
        raise TokensFileError(f"tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if role not in ROLES:
        raise TokensFileError(f"role {role!r}: one of {', '.join(ROLES)}")
    token_id = secrets.token_hex(6)
    token = f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    salt = secrets.token_bytes(16)
    entry = TokenEntry(
        token_id=token_id,
        tenant=tenant,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        salt=salt,
        digest=_scrypt(token, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P),
        quick_check=_quick_check(token, salt),
        role=role,
    )
    with _locked(path):
        entries = read_tokens(path) if path.exists() else {}
        entries[token_id] = entry
        _write(path, entries)
    return token


def revoke(path: Path, *, tenant: str | None = None, token_id: str | None = None) -> list[str]:
    """Remove every token of ``tenant``, or the one with ``token_id``; returns the ids removed."""
    if (tenant is None) == (token_id is None):
        raise TokensFileError("revoke takes a tenant or a token id, not both")
    with _locked(path):
        entries = read_tokens(path)
        gone = [e.token_id for e in entries.values() if e.tenant == tenant or e.token_id == token_id]
        if gone:
            _write(path, {k: v for k, v in entries.items() if k not in gone})
    return gone


def _others_may_read(mode: int, gid: int) -> bool:
    """Anyone but the owner may read or write, except a read-only group that is this process's own: what the kubelet
    makes of a Secret mounted with `defaultMode: 0400` for a pod whose `runAsGroup` is its `fsGroup` (0440, root
    and that group; deploy/kubernetes), a file no other user's process can read."""
    if mode & 0o037:
        return True
    return bool(mode & 0o040) and gid != os.getegid()


def read_tokens(path: Path) -> dict[str, TokenEntry]:
    """The file's entries by token id; refuses a file that others can read or write."""
    try:
        stat = path.stat()
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise TokensFileError(
            f"{path}: no tokens file; create one with `learnerkit scheduler token add TENANT --tokens {path}`"
        ) from e
    except (OSError, ValueError) as e:
        raise TokensFileError(f"{path}: cannot read the tokens file: {e}") from e
    if _others_may_read(stat.st_mode, stat.st_gid):
        mode = stat.st_mode & 0o777
        raise TokensFileError(f"{path}: others may read the tokens file (mode {mode:o}); chmod 600 it")
    try:
        if raw["version"] != FILE_VERSION:
            raise TokensFileError(f"{path}: version {raw['version']!r}, this learnerkit reads {FILE_VERSION}")
        return {
            token_id: TokenEntry(
                token_id=token_id,
                tenant=str(item["tenant"]),
                created_at=str(item["created_at"]),
                salt=bytes.fromhex(item["salt"]),
                digest=bytes.fromhex(item["hash"]),
                n=int(item["scrypt"]["n"]),
                r=int(item["scrypt"]["r"]),
                p=int(item["scrypt"]["p"]),
                quick_check=bytes.fromhex(item["quick_check"]) if "quick_check" in item else None,
                role=_role(path, token_id, item.get("role", TENANT_ROLE)),
            )
            for token_id, item in raw["tokens"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise TokensFileError(f"{path}: not a learnerkit tokens file ({type(e).__name__}: {e})") from e


def _role(path: Path, token_id: str, role: object) -> str:
    if role not in ROLES:
        raise TokensFileError(f"{path}: token {token_id}: role: one of {', '.join(ROLES)}; got {role!r}")
    return str(role)


def _write(path: Path, entries: dict[str, TokenEntry]) -> None:
    """Temp file (created 0600) + fsync + rename, so a reader sees the old file or the new one, never a part."""
    doc = {"version": FILE_VERSION, "tokens": {k: v.to_json() for k, v in sorted(entries.items())}}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise TokensFileError(f"{path}: cannot write the tokens file: {e}") from e


def _parse(header: str | None) -> tuple[str, str]:
    """The token of a bearer header and its id; `AuthError` for anything else."""
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("send the tenant's token as `Authorization: Bearer <token>`")
    token = token.strip()
    match = _TOKEN.match(token)
    if match is None:
        raise AuthError("the token is not a learnerkit token")
    return token, match.group(1)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise read-modify-write of the tokens file between processes (two `token add` at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class TokenStore:
    """Answers "which tenant sends this request?" for the API, from the tokens file and a cache."""

    def __init__(self, path: Path, *, clock: Clock = time.monotonic) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._key = secrets.token_bytes(32)
        self._stamp: tuple[int, int, int] | None = None
        self._entries: dict[str, TokenEntry] = {}
        self._verified: dict[bytes, TokenEntry] = {}
        self._failures = {
            kind: RateLimiter(per_minute, burst=per_minute, clock=clock)
            for kind, per_minute in FAILURES_PER_MINUTE.items()
        }
        self._scrypts = threading.BoundedSemaphore(SCRYPTS_AT_ONCE)
        self._checking: dict[tuple[bytes, str], Future[str]] = {}
        read_tokens(path)  # fail at start-up, not on the first request, when the file is missing or unsafe
        self.reload_if_changed()

    def cached(self, header: str | None) -> str | None:
        """The tenant of a token verified before (one HMAC, no scrypt); None when it must be checked."""
        token, _ = _parse(header)
        fingerprint = self._fingerprint(token)
        with self._lock:
            self.reload_if_changed()
            known = self._verified.get(fingerprint)
        return None if known is None else known.tenant

    def authenticate(self, header: str | None, client: str = "") -> str:
        """The tenant of an ``Authorization: Bearer <token>`` header from ``client`` (its address); raises
        `AuthError`, or `RateLimitedError` when the check failed and the token id or the client has failed too
        often. A valid token is accepted whatever others have failed (the module's rule)."""
        token, token_id = _parse(header)
        fingerprint = self._fingerprint(token)
        with self._lock:
            self.reload_if_changed()
            known = self._verified.get(fingerprint)
            entry = self._entries.get(token_id)
            stamp = self._stamp
        if known is not None:
            return known.tenant
        if entry is None:
            raise AuthError("unknown or revoked token")
        failure_keys = {"token_at_client": f"{token_id} {client}", "client": client}
        if not entry.passes_quick_check(token):
            raise self._failed(failure_keys)
        # One check per token and address at a time: the same token sent in parallel (a client's first requests)
        # waits for that check instead of running a scrypt of its own.
        flight = (fingerprint, client)
        with self._lock:
            pending = self._checking.get(flight)
            leader = pending is None
            if pending is None:
                pending = self._checking[flight] = Future()
        if not leader:
            return pending.result()
        try:
            tenant = self._check(entry, token, failure_keys)
        except (AuthError, RateLimitedError) as e:
            pending.set_exception(e)
            raise
        else:
            pending.set_result(tenant)
            with self._lock:
                if self._stamp == stamp:
                    self._verified[fingerprint] = entry
            return tenant
        finally:
            with self._lock:
                del self._checking[flight]

    def login(self, token: str, client: str) -> tuple[str, str]:
        """The tenant and the token id of a token typed into the console's login form: `authenticate`'s check,
        with its failure limits."""
        header = f"Bearer {token.strip()}"
        tenant = self.authenticate(header, client)
        return tenant, _parse(header)[1]

    def tenant_of_id(self, token_id: str) -> str | None:
        """The tenant of the token with this id while the file still holds it; None once it is revoked (a
        console session keeps the id it logged in with, never the token, and ends with it)."""
        with self._lock:
            self.reload_if_changed()
            entry = self._entries.get(token_id)
        return None if entry is None else entry.tenant

    def operator(self, header: str | None, client: str = "") -> bool:
        """Whether the bearer token of ``header`` is an operator's; `AuthError` (or `RateLimitedError`) as
        `authenticate` for a token that is not valid at all."""
        self.authenticate(header, client)
        return self.is_operator(_parse(header)[1])

    def is_operator(self, token_id: str) -> bool:
        """Whether the token with this id, while the file holds it, is an operator's."""
        with self._lock:
            self.reload_if_changed()
            entry = self._entries.get(token_id)
        return entry is not None and entry.role == OPERATOR_ROLE

    def _check(self, entry: TokenEntry, token: str, failure_keys: dict[str, str]) -> str:
        """One scrypt. An entry without a quick check has its failure counted before the scrypt (refused past the
        limits) and given back when the secret matches: the rule from before the quick check."""
        reserved = self._reserve_failure(failure_keys) if entry.quick_check is None else None
        with self._scrypts:
            matches = entry.matches(token)
        if reserved is not None:
            if not matches:
                raise AuthError("unknown or revoked token")
            for kind, key in reserved.items():
                self._failures[kind].refund(key)
        elif not matches:
            raise self._failed(failure_keys)
        return entry.tenant

    def _failed(self, keys: dict[str, str]) -> AuthError | RateLimitedError:
        """Count a failed check under each key: the 401 to answer, or the 429 where a key had no failures left."""
        wait = max(self._failures[kind].take(key) for kind, key in keys.items())
        if wait:
            return RateLimitedError("too many failed token checks for this token id or address", wait)
        return AuthError("unknown or revoked token")

    def _reserve_failure(self, keys: dict[str, str]) -> dict[str, str]:
        """Count the check as failed under each key before it runs (refunded when it matches); `RateLimitedError`,
        reserving nothing, where a key has no failures left."""
        reserved: dict[str, str] = {}
        for kind, key in keys.items():
            wait = self._failures[kind].take(key)
            if wait:
                for done, done_key in reserved.items():
                    self._failures[done].refund(done_key)
                raise RateLimitedError("too many failed token checks for this token id or address", wait)
            reserved[kind] = key
        return reserved

    def _fingerprint(self, token: str) -> bytes:
        return hmac.new(self._key, token.encode(), hashlib.sha256).digest()

    def reload_if_changed(self) -> None:
        """Re-read the file when it was replaced or changed; forget every verified token then."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            stamp = None
        else:
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp and (stamp is not None or not self._entries):
            return
        self._entries = read_tokens(self.path) if stamp is not None else {}
        self._verified = {}
        self._stamp = stamp
