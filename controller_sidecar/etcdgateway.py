"""etcd's JSON gateway (``POST /v3/...``, etcd 3.4 and later) over urllib3: the only module that speaks HTTP to etcd.

The wire format, as etcd 3.4 writes it: keys and values are base64, 64-bit integers are strings, and fields
that hold their default are left out (a false ``succeeded``, an empty ``value``, a PUT event's ``type``).
A failed call answers ``{"error", "message", "code"}`` with the gRPC status code, which is translated as
before: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and ABORTED, like no answer at all (refused,
reset, timed out, cut off), are a :class:`TransientError`; anything else is a :class:`PermanentError`.

Calls block in a thread pool of the gateway's own, so slow S3 transfers on asyncio's default pool never
delay a status update. A stream (a watch) holds one of its threads while it waits for the next message; its
socket has no read timeout but TCP keep-alive, so a peer that vanished is noticed. With a user name and
password the gateway authenticates first and sends the token with every call; a token etcd no longer
accepts is replaced once per call.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import socket
from collections.abc import AsyncGenerator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import urllib3
from urllib3.exceptions import HTTPError
from urllib3.response import BaseHTTPResponse

from controller_sidecar.errors import PermanentError, TransientError

LOGGER = logging.getLogger(__name__)
T = TypeVar("T")
Json = dict[str, Any]

WORKERS = 16
"""Threads (and pooled connections) per gateway: each open watch holds one."""
READ_BYTES = 64 << 10
TRANSIENT_CODES = {4: "DEADLINE_EXCEEDED", 8: "RESOURCE_EXHAUSTED", 10: "ABORTED", 14: "UNAVAILABLE"}
UNAUTHENTICATED = 16
NOT_FOUND = 5
OUT_OF_RANGE = 11
"""A read at a revision that was compacted away."""
FAILED_PRECONDITION = 9
_KEEPALIVE = [
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 5),
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5),
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
]


class RevisionCompacted(TransientError):
    """The revision a read asked for is gone; reading again at the current one succeeds."""


class LeaseNotFound(PermanentError):
    """A call named a lease etcd no longer has: it expired (or was revoked) since it was last refreshed."""


class _TokenRejected(PermanentError):
    """etcd did not accept the token (expired, or etcd restarted with a new signing key)."""


class _AuthOff(PermanentError):
    """A login to an etcd that has authentication off: calls go without a token."""


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def error_of(what: str, answer: Json, status: int) -> PermanentError | TransientError:
    """The sidecar's error for an answer that carries a gRPC error (unary or stream form) or an HTTP error."""
    error = answer.get("error")
    if isinstance(error, dict):  # a stream's error: {"error": {"grpc_code", "message", ...}}
        code, message = int(error.get("grpc_code", 0)), str(error.get("message", ""))
    else:
        code, message = int(answer.get("code", 0)), str(answer.get("message") or error or "")
    if code in TRANSIENT_CODES:
        return TransientError(f"{what}: etcd answered {TRANSIENT_CODES[code]}: {message}")
    if code == OUT_OF_RANGE and "compacted" in message:
        return RevisionCompacted(f"{what}: {message}")
    if code == NOT_FOUND and "lease not found" in message:
        return LeaseNotFound(f"{what}: {message}")
    if code == FAILED_PRECONDITION and "authentication is not enabled" in message:
        return _AuthOff(message)
    if code == UNAUTHENTICATED:
        return _TokenRejected(f"{what}: etcd refused the token: {message}")
    if code == 0 and status >= 500:
        return TransientError(f"{what}: etcd answered HTTP {status}")
    return PermanentError(f"{what}: etcd failed (code {code}, HTTP {status}): {message}")


class Gateway:
    """One etcd member's gateway; see the module docstring."""

    def __init__(
        self, endpoint: str, *, timeout_s: float, username: str | None = None, password: str | None = None
    ) -> None:
        host, _, port = endpoint.rpartition(":")
        self.endpoint = endpoint
        self._pool = urllib3.HTTPConnectionPool(
            host,
            int(port),
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
            maxsize=WORKERS,
            retries=False,
            socket_options=[*urllib3.connection.HTTPConnection.default_socket_options, *_KEEPALIVE],
        )
        self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="etcd")
        self._login = None if username is None or password is None else {"name": username, "password": password}
        self._token: str | None = None
        self._streams: set[BaseHTTPResponse] = set()

    async def call(self, path: str, body: Mapping[str, Any], what: str) -> Json:
        """POST ``body`` to ``/v3/<path>``; the answer's JSON."""
        return await self._in_thread(self._call, path, body, what)

    async def stream(self, path: str, body: Mapping[str, Any], what: str) -> AsyncGenerator[Json, None]:
        """POST ``body`` to a streaming ``/v3/<path>`` and yield each message's ``result`` until the caller stops."""
        opening = asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(self._open_stream, path, body, what)
        )
        try:
            response = await asyncio.shield(opening)
        except asyncio.CancelledError:  # the stream opens anyway: cut it once it has
            opening.add_done_callback(_shut_when_open)
            raise
        self._streams.add(response)
        pending = b""
        try:
            while True:
                try:
                    chunk = await self._in_thread(response.read1, READ_BYTES)
                except (HTTPError, OSError, ValueError) as e:  # ValueError: read after close()
                    raise TransientError(f"{what}: the stream from etcd broke: {e}") from e
                if not chunk:
                    raise TransientError(f"{what}: etcd ended the stream")
                *lines, pending = (pending + chunk).split(b"\n")
                for line in filter(bytes.strip, lines):
                    message = _json(line, what)
                    if "result" not in message:
                        raise error_of(what, message, response.status)
                    result = message["result"]
                    if self._login is not None and "Unauthenticated" in str(result.get("cancel_reason", "")):
                        self._token = None  # a watch etcd cancelled for its token: the next one logs in again
                        raise TransientError(f"{what}: etcd cancelled it: {result['cancel_reason']}")
                    yield result
        finally:
            self._streams.discard(response)
            _shut(response)

    def close(self) -> None:
        """Cut every open stream (which frees its thread), then let the threads go."""
        for response in list(self._streams):
            _shut(response)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._pool.close()

    def _call(self, path: str, body: Mapping[str, Any], what: str) -> Json:
        return self._logged_in(lambda: _answer(self._post(path, body, what), what))

    def _open_stream(self, path: str, body: Mapping[str, Any], what: str) -> BaseHTTPResponse:
        def open_once() -> BaseHTTPResponse:
            response = self._post(path, body, what, stream=True)
            if response.status != 200:
                _answer(response, what)  # raises: the error etcd answered
            sock = getattr(response.connection, "sock", None)
            if sock is not None:
                sock.settimeout(None)  # a watch may wait hours for its next event; keep-alive watches the peer
            return response

        return self._logged_in(open_once)

    def _logged_in(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, and once more with a new token when etcd rejected the one it had."""
        try:
            return attempt()
        except _TokenRejected:
            if self._login is None:
                raise
            self._token = None
            return attempt()

    def _post(self, path: str, body: Mapping[str, Any], what: str, *, stream: bool = False) -> BaseHTTPResponse:
        headers = {"Content-Type": "application/json"}
        if self._login is not None and path != "auth/authenticate":
            token = self._token if self._token is not None else self._authenticate(what)
            if token:
                headers["Authorization"] = token
        try:
            return self._pool.urlopen(
                "POST",
                f"/v3/{path}",
                body=json.dumps(body).encode(),
                headers=headers,
                preload_content=not stream,
                release_conn=not stream,
            )
        except (HTTPError, OSError) as e:
            raise TransientError(f"{what}: etcd at {self.endpoint} did not answer: {e}") from e

    def _authenticate(self, what: str) -> str:
        """A fresh token ('' when etcd has authentication off)."""
        try:
            answer = _answer(self._post("auth/authenticate", self._login or {}, what), what)
            self._token = str(answer["token"])
        except _AuthOff:
            self._token = ""
        except PermanentError as e:
            raise PermanentError(f"etcd refused the credentials: {e}") from e
        return self._token

    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(function, *args))


def _answer(response: BaseHTTPResponse, what: str) -> Json:
    """The JSON of a successful answer; the translated error of any other."""
    try:
        data = response.data
    except (HTTPError, OSError) as e:
        raise TransientError(f"{what}: the answer from etcd broke off: {e}") from e
    finally:
        response.release_conn()
    answer = _json(data, what) if data.lstrip().startswith(b"{") else {"message": data.decode(errors="replace")}
    if response.status == 200 and "error" not in answer:
        return answer
    raise error_of(what, answer, response.status)


def _json(data: bytes, what: str) -> Json:
    try:
        answer = json.loads(data)
    except ValueError as e:
        raise TransientError(f"{what}: etcd sent something that is not JSON: {data[:200]!r}") from e
    if not isinstance(answer, dict):
        raise PermanentError(f"{what}: etcd sent {type(answer).__name__}, not an object")
    return answer


def _shut_when_open(opening: asyncio.Future[BaseHTTPResponse]) -> None:
    if opening.exception() is None:
        _shut(opening.result())


def _shut(response: BaseHTTPResponse) -> None:
    """Unblock a thread reading the stream and drop its connection (never back to the pool: a reader may hold it).

    A stream that broke has let its connection go already: then there is nothing to unblock.
    """
    with contextlib.suppress(RuntimeError, ValueError):
        response.shutdown()
    response.close()
