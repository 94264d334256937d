"""An HTTP client of the scheduler's REST API for the CLI; errors come back as learnerkit errors.

The base URL and token come from arguments or ``$LEARNERKIT_SCHEDULER_URL`` / ``$LEARNERKIT_TOKEN``. An ``https``
URL is verified against the CA file ``$LEARNERKIT_SCHEDULER_CA`` (else the system's CAs), and a certificate that
fails is an error, never a retry over plain HTTP. Every
answer the server refuses becomes the error type its status means (401 `AuthError`, 404 `JobNotFoundError`,
409 `JobStateError`, 422 `ManifestRejectedError`), carrying the server's message.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import select
import socket
import ssl
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from controller_sidecar.metricrecords import parse_record
from learnerkit.scheduler.client.sweepviews import sweep_view
from learnerkit.scheduler.errors import (
    ApiError,
    AuthError,
    JobNotFoundError,
    JobStateError,
    ManifestRejectedError,
    ModelMoveRefusedError,
    SchedulerError,
    SchedulerUnreachableError,
)
from learnerkit.scheduler.facade import (
    JUDGES_MODEL,
    MAX_PAGE_JOBS,
    MODEL_NOT_EVALUATED,
    AttemptView,
    EvaluationReport,
    EvaluationReports,
    EvaluationView,
    JobPage,
    JobQuery,
    JobView,
    LearnerView,
    LogChunk,
    StoredFile,
    SweepOfJob,
    SweepPage,
    SweepView,
)

URL_ENV = "LEARNERKIT_SCHEDULER_URL"
TOKEN_ENV = "LEARNERKIT_TOKEN"  # noqa: S105 (the variable's name, not a token)
CA_ENV = "LEARNERKIT_SCHEDULER_CA"
DEFAULT_URL = "http://127.0.0.1:8080"
NEXT_OFFSET_HEADER = "X-Next-Offset"
NEXT_TOKEN_HEADER = "X-Next-Token"  # noqa: S105 (a header name, not a token)
TOTAL_HEADER = "X-Total-Count"
FINISHED_HEADER = "X-Finished"
LOG_CHUNK = 1 << 20
UPLOAD_CHUNK = 1 << 20
"""The model is read from disk and sent in pieces of this many bytes."""
INTERIM_PEEK = 1024
"""A log is handed on in pieces of at most this many bytes, as they arrive."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer, read whole (the API's answers are small JSON documents or one log chunk)."""

    method: str
    url: str
    status: int
    reason: str
    headers: Mapping[str, str]
    """Names in lower case."""
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SchedulerError(f"{self.method} {self.url}: the answer is not JSON ({e})") from e


def read_events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any] | None]:
    """Server-Sent Events text as dicts (``id``, ``event`` and the data's JSON fields); None per comment line."""
    fields: dict[str, str] = {}
    while line := response.readline():
        text = line.decode().rstrip("\r\n")
        if text.startswith(":"):
            yield None
        elif text:
            name, _, value = text.partition(":")
            fields[name] = value.removeprefix(" ")
        elif "event" in fields:
            yield {"id": fields.get("id"), "event": fields["event"]} | json.loads(fields.get("data") or "{}")
            fields = {}
        else:
            fields = {}


class SchedulerClient:
    """Speaks HTTP with the standard library's ``http.client`` over one kept-alive connection: the `job` verbs
    start in a fraction of the time a third-party HTTP stack takes to import (bench/cli.py)."""

    def __init__(
        self, base_url: str, token: str | None, *, timeout_s: float = 30.0, ca_file: Path | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.ca_file = ca_file
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SchedulerError(f"scheduler URL {base_url!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
        self._parts = parts
        self._tls: ssl.SSLContext | None = None
        if parts.scheme == "https":
            try:
                self._tls = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as e:
                raise SchedulerError(f"{CA_ENV}={ca_file}: not a CA file this client can read: {e}") from e
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._connection: http.client.HTTPConnection | None = None

    def copy(self) -> SchedulerClient:
        """A client of the same server and token with a connection of its own (one per thread)."""
        token = self._headers.get("Authorization", "").removeprefix("Bearer ") or None
        return SchedulerClient(self.base_url, token, timeout_s=self.timeout_s, ca_file=self.ca_file)

    @classmethod
    def from_env(
        cls, url: str | None = None, token: str | None = None, environ: Mapping[str, str] | None = None
    ) -> SchedulerClient:
        """Arguments first, then the environment; the URL defaults to the local scheduler."""
        env = os.environ if environ is None else environ
        ca_file = Path(env[CA_ENV]) if env.get(CA_ENV) else None
        return cls(url or env.get(URL_ENV) or DEFAULT_URL, token or env.get(TOKEN_ENV), ca_file=ca_file)

    def plain_http_warning(self) -> str | None:
        """What to tell the user when the token would cross a network in clear: an ``http`` URL to a host that
        is not this machine's loopback."""
        host = self._parts.hostname or ""
        if self._parts.scheme != "http" or host == "localhost" or _is_loopback_address(host):
            return None
        return (
            f"warning: {self.base_url} is plain HTTP: the token and model code cross the network in clear; "
            f"use the scheduler's https:// URL (and {CA_ENV} for its CA file)"
        )

    def submit(
        self,
        manifest_text: str,
        source: str = "manifest.yml",
        *,
        image: str | None = None,
        model: Path | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> JobView:
        """Queue a job; ``model`` (a zip file) goes with it in one multipart request, read from disk as it is
        sent; ``progress`` is told each piece's size as it leaves."""
        if model is None:
            body = {"manifest": manifest_text, "source": source, "image": image}
            return job_view(self._request("POST", "/v1/jobs", json_body=body).json())
        fields = {"manifest": manifest_text, "source": source} | ({"image": image} if image else {})
        return job_view(self._send_model("/v1/jobs", fields, model, progress or (lambda _n: None)).json())

    def submit_sweep(
        self,
        search_text: str,
        manifest_text: str,
        *,
        search_source: str = "search.yml",
        manifest_source: str = "manifest.yml",
        image: str | None = None,
        model: Path | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> SweepView:
        """Start a sweep; ``model`` goes with it as with `submit`."""
        if model is None:
            body = {
                "search": search_text,
                "search_source": search_source,
                "manifest": manifest_text,
                "manifest_source": manifest_source,
                "image": image,
            }
            return sweep_view(self._request("POST", "/v1/sweeps", json_body=body).json())
        fields = {"search": search_text, "search_source": search_source, "manifest": manifest_text}
        fields |= {"source": manifest_source} | ({"image": image} if image else {})
        return sweep_view(self._send_model("/v1/sweeps", fields, model, progress or (lambda _n: None)).json())

    def list_sweeps(self) -> list[SweepView]:
        """Every sweep of the tenant, oldest first, page after page."""
        sweeps: list[SweepView] = []
        token: str | None = None
        while True:
            page = self.page_sweeps(MAX_PAGE_JOBS, token)
            sweeps += page.sweeps
            if page.next is None:
                return sweeps
            token = page.next

    def page_sweeps(self, limit: int, next_token: str | None = None) -> SweepPage:
        """One page of the tenant's sweeps (`GET /v1/sweeps`): ``limit`` of them after ``next_token``'s."""
        params = [("limit", str(limit))] + ([("next", next_token)] if next_token is not None else [])
        answer = self._request("GET", "/v1/sweeps", params=params)
        sweeps = tuple(sweep_view(item) for item in answer.json())
        total = answer.headers.get(TOTAL_HEADER.lower(), "")
        return SweepPage(
            sweeps,
            answer.headers.get(NEXT_TOKEN_HEADER.lower()) or None,
            int(total) if total.isdigit() else len(sweeps),
        )

    def get_sweep(self, sweep_id: str) -> SweepView:
        return sweep_view(self._request("GET", f"/v1/sweeps/{_quoted(sweep_id)}").json())

    def sweep_verb(self, sweep_id: str, verb: str) -> SweepView:
        """``halt``, ``resume`` or ``cancel``."""
        return sweep_view(self._request("POST", f"/v1/sweeps/{_quoted(sweep_id)}/{verb}").json())

    def list_jobs(self) -> list[JobView]:
        """Every job of the tenant, oldest first, page after page."""
        jobs: list[JobView] = []
        query = JobQuery(limit=MAX_PAGE_JOBS)
        while True:
            page = self.page_jobs(query)
            jobs += page.jobs
            if page.next is None:
                return jobs
            query = replace(query, next=page.next)

    def page_jobs(self, query: JobQuery) -> JobPage:
        """One page of the tenant's jobs (`GET /v1/jobs` with the query's filters, order and token)."""
        params: list[tuple[str, str]] = [("limit", str(query.limit))]
        params.append(("sort", f"{'-' if query.descending else ''}{query.sort}"))
        params += [("status", status) for status in sorted(query.statuses)]
        for name, value in (("name", query.name), ("framework", query.framework), ("q", query.search)):
            if value is not None:
                params.append((name, value))
        for name, moment in (("since", query.since), ("until", query.until)):
            if moment is not None:
                params.append((name, datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")))
        if query.next is not None:
            params.append(("next", query.next))
        answer = self._request("GET", "/v1/jobs", params=params)
        jobs = tuple(job_view(item) for item in answer.json())
        total = answer.headers.get(TOTAL_HEADER.lower(), "")
        return JobPage(
            jobs=jobs,
            cursors=(),
            next=answer.headers.get(NEXT_TOKEN_HEADER.lower()) or None,
            total=int(total) if total.isdigit() else len(jobs),
        )

    def get(self, job_id: str) -> JobView:
        return job_view(self._request("GET", f"/v1/jobs/{_quoted(job_id)}").json())

    def evaluate(self, job_id: str, text: str, source: str = "evaluations.yml") -> JobView:
        body = {"manifest": text, "source": source}
        return job_view(self._request("POST", f"/v1/jobs/{_quoted(job_id)}/evaluations", json_body=body).json())

    def evaluation_reports(self, job_id: str) -> EvaluationReports:
        data = self._request("GET", f"/v1/jobs/{_quoted(job_id)}/evaluations").json()
        try:
            return EvaluationReports(
                job_id=str(data["job_id"]),
                round=int(data["round"]),
                evaluations=tuple(
                    EvaluationReport(
                        evaluation=_evaluation_view(item["evaluation"]),
                        summary=str(item.get("summary", "")),
                        report=item.get("report") if isinstance(item.get("report"), dict) else None,
                    )
                    for item in data.get("evaluations", ())
                ),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise SchedulerError(f"the scheduler sent reports this client cannot read ({type(e).__name__}: {e})") from e

    def halt(self, job_id: str) -> JobView:
        return job_view(self._request("POST", f"/v1/jobs/{_quoted(job_id)}/halt").json())

    def resume(self, job_id: str) -> JobView:
        return job_view(self._request("POST", f"/v1/jobs/{_quoted(job_id)}/resume").json())

    def cancel(self, job_id: str) -> JobView:
        return job_view(self._request("POST", f"/v1/jobs/{_quoted(job_id)}/cancel").json())

    def delete(self, job_id: str) -> JobView:
        return job_view(self._request("DELETE", f"/v1/jobs/{_quoted(job_id)}").json())

    def logs(
        self,
        job_id: str,
        *,
        learner_id: int = 1,
        offset: int = 0,
        tail: int | None = None,
        attempt: int | None = None,
        length: int | None = None,
    ) -> LogChunk:
        """The log of ``attempt`` (default: the latest) from ``offset`` (or its last ``tail`` lines), at most
        ``length`` bytes of it, read whole."""
        pieces: list[bytes] = []
        next_offset, finished = self.copy_logs(
            job_id, pieces.append, learner_id=learner_id, offset=offset, tail=tail, attempt=attempt, length=length
        )
        return LogChunk(data=b"".join(pieces), next_offset=next_offset, finished=finished)

    def copy_logs(
        self,
        job_id: str,
        write: Callable[[bytes], object],
        *,
        learner_id: int = 1,
        offset: int = 0,
        tail: int | None = None,
        attempt: int | None = None,
        length: int | None = None,
    ) -> tuple[int, bool]:
        """Hand the log of ``attempt`` (default: the latest) from ``offset`` (or its last ``tail`` lines) to
        ``write`` as it arrives, a chunk at a time; return the next offset to ask for and whether the log is
        finished."""
        params: dict[str, int] = {"learner": learner_id, "offset": offset}
        for name, value in (("tail", tail), ("attempt", attempt), ("length", length)):
            if value is not None:
                params[name] = value
        path = f"/v1/jobs/{_quoted(job_id)}/logs"
        response = self._send("GET", path, None, params)
        url = self.base_url + path
        if not 200 <= response.status < 300:
            raise error_from_response(self._answer("GET", url, response, self._read(response, response.read)))
        headers = {name.lower(): value for name, value in response.getheaders()}
        try:
            next_offset = int(headers[NEXT_OFFSET_HEADER.lower()])
        except (KeyError, ValueError) as e:
            self.close()
            raise SchedulerError(f"{url}: the answer has no valid {NEXT_OFFSET_HEADER} header") from e
        finished = headers.get(FINISHED_HEADER.lower(), "").lower() == "true"
        # read(n): a body cut short of its Content-Length raises IncompleteRead, and the full one frees the
        # connection for the next request.
        while chunk := self._read(response, partial(response.read, LOG_CHUNK)):
            write(chunk)
        if response.will_close:
            self.close()
        return next_offset, finished

    def _send_model(
        self, path: str, fields: Mapping[str, str], model: Path, progress: Callable[[int], object]
    ) -> Answer:
        """POST ``fields`` and the file ``model`` as multipart/form-data, asking ``Expect: 100-continue``: a
        scheduler that refuses (a model over its limit, a bad token) says so before a byte of the model leaves."""
        boundary = f"learnerkit-{uuid.uuid4().hex}"
        head = b"".join(_text_part(boundary, name, value) for name, value in fields.items())
        head += _file_part_header(boundary, "model", model.name)
        tail = f"\r\n--{boundary}--\r\n".encode()
        size = model.stat().st_size
        headers = dict(self._headers) | {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(head) + size + len(tail)),
            "Expect": "100-continue",
        }
        url = self.base_url + path
        connection = self._reusable() or self._connect()
        try:
            connection.putrequest("POST", self._parts.path + path, skip_accept_encoding=True)
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.endheaders()
            if _may_continue(connection, self.timeout_s):
                connection.send(head)
                with model.open("rb") as stream:
                    while chunk := stream.read(UPLOAD_CHUNK):
                        connection.send(chunk)
                        progress(len(chunk))
                connection.send(tail)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise self._unreachable(f"sending the model to the scheduler at {self.base_url} failed", e) from e
        answer = self._answer("POST", url, response, self._read(response, response.read))
        if not answer.ok:
            self.close()  # the body may not have been sent: the connection cannot carry another request
            raise error_from_response(answer)
        return answer

    def metrics_history(self, job_id: str, *, learner_id: int = 1) -> list[dict[str, Any]]:
        """The learner's metric history: each stored metrics.jsonl record, oldest first (lines that are no
        record, :func:`~controller_sidecar.metricrecords.parse_record`, are skipped)."""
        pieces: list[bytes] = []
        self._stream(f"/v1/jobs/{_quoted(job_id)}/metrics", {"learner": learner_id}, pieces.append)
        lines = b"".join(pieces).splitlines()
        return [record for line in lines if (record := parse_record(line)) is not None]

    def public_key(self) -> str:
        """The platform's public signing key (PEM), as the API serves it."""
        return self._request("GET", "/v1/signing-key").body.decode()

    def public_keys(self) -> list[str]:
        """Every public key (PEM) the platform signed with, the current one first (``GET /v1/keys``); a scheduler
        from before key rotation serves its one key at ``/v1/signing-key`` only."""
        try:
            items = self._request("GET", "/v1/keys").json()
        except JobNotFoundError:  # the API answers any unknown path 404 not_found
            return [self.public_key()]
        try:
            return [str(item["pem"]) for item in items["keys"]]
        except (KeyError, TypeError) as e:
            raise SchedulerError(f"the scheduler sent a key list this client cannot read ({e})") from e

    def register_model(
        self, name: str, job_id: str, parent: str | None = None, store_keys: tuple[str, str] | None = None
    ) -> dict[str, Any]:
        """Have the scheduler store the COMPLETED job's model as a version of ``name`` (docs/catalog.md);
        ``store_keys``: (access key, secret key) of the job's results store, lent for this one read."""
        body: dict[str, Any] = {"job": job_id, "parent": parent}
        if store_keys is not None:
            body["store_keys"] = {"access_key": store_keys[0], "secret_key": store_keys[1]}
        version: dict[str, Any] = self._request(
            "POST", f"/v1/models/{quote(name, safe='')}/versions", json_body=body
        ).json()
        return version

    def list_models(self) -> list[dict[str, Any]]:
        """The token's tenant's models, each with its versions (`model list`)."""
        rows: list[dict[str, Any]] = self._request("GET", "/v1/models").json()
        return rows

    def move_alias(self, name: str, alias: str, version: str) -> dict[str, Any]:
        """Point ``alias`` at ``version``, signed by the scheduler (`model alias`); ModelMoveRefusedError naming
        the failed gates."""
        path = f"/v1/models/{quote(name, safe='')}/aliases/{quote(alias, safe='')}"
        move: dict[str, Any] = self._request("POST", path, json_body={"version": version}).json()
        return move

    def verify_model(self, name: str, reference: str) -> dict[str, Any]:
        """The version or alias checked again by the scheduler with the platform's keys (`model verify`)."""
        path = f"/v1/models/{quote(name, safe='')}/verify/{quote(reference, safe=':')}"
        result: dict[str, Any] = self._request("GET", path).json()
        return result

    def list_files(self, job_id: str, *, what: str = "all") -> list[StoredFile]:
        items = self._request("GET", f"/v1/jobs/{_quoted(job_id)}/files", params={"what": what}).json()
        try:
            return [StoredFile(str(i["path"]), int(i["size"]), str(i["kind"])) for i in items]
        except (KeyError, TypeError, ValueError) as e:
            raise SchedulerError(f"the scheduler sent a file list this client cannot read ({e})") from e

    def copy_file(self, job_id: str, path: str, write: Callable[[bytes], object]) -> None:
        """Hand one stored file of the job to ``write`` as it arrives, a chunk at a time."""
        self._stream(f"/v1/jobs/{_quoted(job_id)}/files/{quote(path)}", None, write)

    def copy_evaluation_data(self, job_id: str, uri: str, write: Callable[[bytes], object]) -> None:
        """Hand an evaluation data object a round of the job lists to ``write`` as it arrives."""
        self._stream(f"/v1/jobs/{_quoted(job_id)}/evaluation-data", {"uri": uri}, write)

    def _stream(self, path: str, params: Mapping[str, Any] | None, write: Callable[[bytes], object]) -> None:
        response = self._send("GET", path, None, params)
        if not 200 <= response.status < 300:
            url = self.base_url + path
            raise error_from_response(self._answer("GET", url, response, self._read(response, response.read)))
        while chunk := self._read(response, partial(response.read, LOG_CHUNK)):
            write(chunk)
        if response.will_close:
            self.close()

    def events(self, after: str | None = None) -> Iterator[dict[str, Any] | None]:
        """The tenant's events from ``GET /v1/events`` as they come (`docs/api.md`, "Events"), each as its id, its
        name and its JSON data in one dict; None for a keep-alive (about every 15 s). A broken stream is opened
        again with the last id (``Last-Event-ID``), so none is missed; a refusal raises as other calls do."""
        last = after
        while True:
            headers = dict(self._headers) | {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = last
            response = self._send("GET", "/v1/events", None, None, headers)
            if response.status != 200:
                url = self.base_url + "/v1/events"
                raise error_from_response(self._answer("GET", url, response, self._read(response, response.read)))
            try:
                for item in read_events(response):
                    if item is not None:
                        last = item["id"]
                    yield item
            except (OSError, http.client.HTTPException):
                pass  # broken off: opened again from the last id
            self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | list[tuple[str, str]] | None = None,
    ) -> Answer:
        headers = dict(self._headers)
        data = None
        if json_body is not None:
            data = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        response = self._send(method, path, data, params, headers)
        answer = self._answer(method, self.base_url + path, response, self._read(response, response.read))
        if answer.ok:
            return answer
        raise error_from_response(answer)

    def _send(
        self,
        method: str,
        path: str,
        data: bytes | None,
        params: Mapping[str, Any] | list[tuple[str, str]] | None,
        headers: Mapping[str, str] | None = None,
    ) -> http.client.HTTPResponse:
        """Send one request and return the answer with its headers read, its body not yet."""
        target = self._parts.path + path + (f"?{urlencode(params)}" if params else "")
        connection = self._reusable() or self._connect()
        try:
            connection.request(method, target, body=data, headers=dict(headers or self._headers))
            return connection.getresponse()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise self._unreachable(f"cannot reach the scheduler at {self.base_url}", e) from e

    def _read(self, response: http.client.HTTPResponse, read: Callable[[], bytes]) -> bytes:
        try:
            return read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise SchedulerUnreachableError(f"the scheduler at {self.base_url} broke off its answer: {e}") from e

    def _answer(self, method: str, url: str, response: http.client.HTTPResponse, body: bytes) -> Answer:
        if response.will_close:
            self.close()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return Answer(method, url, response.status, response.reason, headers, body)

    def _reusable(self) -> http.client.HTTPConnection | None:
        """The kept-alive connection, unless the server has closed it meanwhile (its socket then reads as
        ready): a request is never sent twice, so a dropped connection is found before sending, not after."""
        connection = self._connection
        if connection is None or connection.sock is None:
            return None
        readable, _, _ = select.select([connection.sock], [], [], 0)
        if readable:
            self.close()
            return None
        return connection

    def _unreachable(self, doing: str, error: Exception) -> SchedulerUnreachableError:
        if isinstance(error, ssl.SSLCertVerificationError):
            trusted = f"the CA in {CA_ENV} ({self.ca_file})" if self.ca_file else f"the system's CAs ({CA_ENV} unset)"
            return SchedulerUnreachableError(
                f"{doing}: its certificate is not trusted: {error.verify_message}; this client trusts {trusted}"
            )
        return SchedulerUnreachableError(f"{doing}: {error}")

    def _connect(self) -> http.client.HTTPConnection:
        host, port = self._parts.hostname or "", self._parts.port
        if self._tls is not None:
            self._connection = http.client.HTTPSConnection(host, port, timeout=self.timeout_s, context=self._tls)
        else:
            self._connection = http.client.HTTPConnection(host, port, timeout=self.timeout_s)
        return self._connection


def _is_loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def error_from_response(response: Answer) -> SchedulerError:
    """The learnerkit error for a refused request, with the server's own message."""
    try:
        body = json.loads(response.body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        body = {"message": response.body.decode("utf-8", "replace").strip()[:500] or response.reason}
    message = str(body.get("message") or response.reason)
    status = response.status
    if status == 401:
        return AuthError(f"{message} (set ${TOKEN_ENV} or pass --token)")
    if status == 404 and body.get("error") == "not_found":
        return JobNotFoundError(message)
    if status == 409 and isinstance(body.get("failed"), list):
        return ModelMoveRefusedError(message, [str(f) for f in body["failed"]])
    if status == 409:
        return JobStateError(message)
    if status == 422 and isinstance(body.get("problems"), list):
        return ManifestRejectedError(message, [p for p in body["problems"] if isinstance(p, dict)])
    return ApiError(f"{response.method} {response.url}: {status} {message}", status)


def job_view(data: Mapping[str, Any]) -> JobView:
    """A `JobView` from its JSON form; fields this client does not know are ignored."""
    try:
        learners = tuple(
            LearnerView(
                learner_id=int(item["learner_id"]),
                status=str(item["status"]),
                message=str(item.get("message", "")),
                exit_code=item.get("exit_code"),
                metrics={str(k): float(v) for k, v in (item.get("metrics") or {}).items()},
                alive=bool(item.get("alive", False)),
            )
            for item in data.get("learners", ())
        )
        attempts = tuple(_attempt_view(item) for item in data.get("attempts", ()))
        return JobView(
            job_id=str(data["job_id"]),
            tenant=str(data["tenant"]),
            name=str(data["name"]),
            status=str(data["status"]),
            reason=str(data.get("reason", "")),
            submitted_at=str(data.get("submitted_at", "")),
            updated_at=str(data.get("updated_at", "")),
            priority=int(data.get("priority", 0)),
            gpus=int(data.get("gpus", 0)),
            learners=learners,
            restarts=int(data.get("restarts", 0)),
            results=str(data.get("results", "")),
            evaluations=tuple(_evaluation_view(item) for item in data.get("evaluations", ())),
            model=str(data.get("model", MODEL_NOT_EVALUATED)),
            attempts=attempts,
            sweep=SweepOfJob(str(sweep["sweep_id"]), int(sweep["trial"])) if (sweep := data.get("sweep")) else None,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SchedulerError(f"the scheduler sent a job this client cannot read ({type(e).__name__}: {e})") from e


def _evaluation_view(item: Mapping[str, Any]) -> EvaluationView:
    return EvaluationView(
        name=str(item["name"]),
        kind=str(item["kind"]),
        outcome=str(item["outcome"]),
        message=str(item.get("message", "")),
        report=str(item.get("report", "")),
        judges=str(item.get("judges", JUDGES_MODEL)),
    )


def _attempt_view(item: Mapping[str, Any]) -> AttemptView:
    lost = item.get("work_lost_s")
    return AttemptView(
        number=int(item["number"]),
        nodes=tuple(str(n) for n in item.get("nodes", ())),
        started_at=str(item.get("started_at", "")),
        ended_at=None if item.get("ended_at") is None else str(item["ended_at"]),
        ended_by=None if item.get("ended_by") is None else str(item["ended_by"]),
        reason=str(item.get("reason", "")),
        resumed_from=None if item.get("resumed_from") is None else int(item["resumed_from"]),
        checkpoint_digest=None if item.get("checkpoint_digest") is None else str(item["checkpoint_digest"]),
        work_lost_s=None if lost is None else float(lost),
        steps_lost=None if item.get("steps_lost") is None else int(item["steps_lost"]),
    )


def _text_part(boundary: str, name: str, value: str) -> bytes:
    return f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()


def _file_part_header(boundary: str, name: str, filename: str) -> bytes:
    quoted = filename.replace('"', "_").replace("\r", "_").replace("\n", "_")
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{quoted}"\r\n'
        "Content-Type: application/zip\r\n\r\n"
    ).encode()


def _may_continue(connection: http.client.HTTPConnection, timeout_s: float) -> bool:
    """After the headers of an ``Expect: 100-continue`` request: True to send the body (the server said 100
    Continue, consumed here, or said nothing in time), False when its final answer came first."""
    sock = connection.sock
    if sock is None:
        return True
    readable, _, _ = select.select([sock], [], [], timeout_s)
    if not readable:
        return True
    peeked = sock.recv(INTERIM_PEEK, socket.MSG_PEEK)
    if not peeked.startswith((b"HTTP/1.1 100", b"HTTP/1.0 100")):
        return False
    end = peeked.find(b"\r\n\r\n")
    if end < 0:
        raise http.client.HTTPException("the interim 100 Continue answer is longer than expected")
    sock.recv(end + 4)
    return True


def _quoted(job_id: str) -> str:
    return quote(job_id, safe="")
