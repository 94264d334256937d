"""An HTTP client of the scheduler's REST API for the CLI; errors come back as learnerkit errors.

The base URL and token come from arguments or ``$LEARNERKIT_SCHEDULER_URL`` / ``$LEARNERKIT_TOKEN``. Every
answer the server refuses becomes the error type its status means (401 `AuthError`, 404 `JobNotFoundError`,
409 `JobStateError`, 422 `ManifestRejectedError`), carrying the server's message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import requests

from learnerkit.scheduler.errors import (
    ApiError,
    AuthError,
    JobNotFoundError,
    JobStateError,
    ManifestRejectedError,
    SchedulerError,
    SchedulerUnreachableError,
)
from learnerkit.scheduler.facade import JobView, LearnerView, LogChunk

URL_ENV = "LEARNERKIT_SCHEDULER_URL"
TOKEN_ENV = "LEARNERKIT_TOKEN"  # noqa: S105 (the variable's name, not a token)
DEFAULT_URL = "http://127.0.0.1:8080"
NEXT_OFFSET_HEADER = "X-Next-Offset"
FINISHED_HEADER = "X-Finished"


class SchedulerClient:
    def __init__(self, base_url: str, token: str | None, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"

    @classmethod
    def from_env(
        cls, url: str | None = None, token: str | None = None, environ: Mapping[str, str] | None = None
    ) -> SchedulerClient:
        """Arguments first, then the environment; the URL defaults to the local scheduler."""
        env = os.environ if environ is None else environ
        return cls(url or env.get(URL_ENV) or DEFAULT_URL, token or env.get(TOKEN_ENV))

    def submit(self, manifest_text: str, source: str = "manifest.yml") -> JobView:
        body = {"manifest": manifest_text, "source": source}
        return job_view(self._request("POST", "/v1/jobs", json=body).json())

    def list_jobs(self) -> list[JobView]:
        return [job_view(item) for item in self._request("GET", "/v1/jobs").json()]

    def get(self, job_id: str) -> JobView:
        return job_view(self._request("GET", f"/v1/jobs/{_quoted(job_id)}").json())

    def halt(self, job_id: str) -> JobView:
        return job_view(self._request("POST", f"/v1/jobs/{_quoted(job_id)}/halt").json())

    def resume(self, job_id: str) -> JobView:
        return job_view(self._request("POST", f"/v1/jobs/{_quoted(job_id)}/resume").json())

    def cancel(self, job_id: str) -> JobView:
        return job_view(self._request("POST", f"/v1/jobs/{_quoted(job_id)}/cancel").json())

    def logs(self, job_id: str, *, learner_id: int = 1, offset: int = 0) -> LogChunk:
        params = {"learner": learner_id, "offset": offset}
        response = self._request("GET", f"/v1/jobs/{_quoted(job_id)}/logs", params=params)
        try:
            next_offset = int(response.headers[NEXT_OFFSET_HEADER])
        except (KeyError, ValueError) as e:
            raise SchedulerError(f"{response.url}: the answer has no valid {NEXT_OFFSET_HEADER} header") from e
        finished = response.headers.get(FINISHED_HEADER, "").lower() == "true"
        return LogChunk(data=response.content, next_offset=next_offset, finished=finished)

    def close(self) -> None:
        self._session.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = self.base_url + path
        try:
            response = self._session.request(method, url, timeout=self.timeout_s, **kwargs)
        except requests.RequestException as e:
            raise SchedulerUnreachableError(f"cannot reach the scheduler at {self.base_url}: {e}") from e
        if response.ok:
            return response
        raise error_from_response(response)


def error_from_response(response: requests.Response) -> SchedulerError:
    """The learnerkit error for a refused request, with the server's own message."""
    try:
        body = response.json()
    except requests.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        body = {"message": response.text.strip()[:500] or response.reason}
    message = str(body.get("message") or response.reason)
    status = response.status_code
    if status == 401:
        return AuthError(f"{message} (set ${TOKEN_ENV} or pass --token)")
    if status == 404 and body.get("error") == "not_found":
        return JobNotFoundError(message)
    if status == 409:
        return JobStateError(message)
    if status == 422 and isinstance(body.get("problems"), list):
        return ManifestRejectedError(message, [p for p in body["problems"] if isinstance(p, dict)])
    return ApiError(f"{response.request.method} {response.url}: {status} {message}", status)


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
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SchedulerError(f"the scheduler sent a job this client cannot read ({type(e).__name__}: {e})") from e


def _quoted(job_id: str) -> str:
    return quote(job_id, safe="")
