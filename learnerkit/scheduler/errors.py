"""The scheduler's errors, all rooted at `LearnerkitError`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.common.yamlfile import YamlError


class SchedulerError(LearnerkitError):
    """Root of the scheduler's errors."""


class ManifestError(YamlError):
    """A manifest cannot be used; `problems` names the line and field path of every problem found."""


class InvalidRequestError(SchedulerError, ConfigError):
    """A node, learner request or job that cannot be valid (negative resources, GPUs without a type)."""


class CapacityError(SchedulerError):
    """A reservation that does not fit the node, or a release of more than was reserved."""


class UnknownJobError(SchedulerError):
    """No job with this id is known to the scheduler."""


class UnknownSweepError(UnknownJobError):
    """The tenant has no sweep with this id (another tenant's is reported the same way)."""


class JobStateError(SchedulerError):
    """The operation does not apply to the job in its current state (e.g. running a job that is queued)."""


class ModelMoveRefusedError(JobStateError):
    """The scheduler refused an alias move (409): the version does not prove every check, ``failed`` names the
    gates (a move kept waiting by another is `ModelBusyError`, a plain 409 `JobStateError` to a client)."""

    def __init__(self, message: str, failed: list[str]) -> None:
        super().__init__(message)
        self.failed = failed


class ModelBusyError(JobStateError):
    """Another alias move of the model held its lock for longer than a move waits (409)."""


class InvalidObjectError(SchedulerError):
    """A generated Kubernetes object does not validate against the pinned Kubernetes schema."""


class BackendError(SchedulerError):
    """The cluster (or engine) refused or failed an operation on a named object."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status the API answered with; None when it could not be reached at all."""


class UnknownNodeError(SchedulerError):
    """A drain or undrain names a node the scheduler does not know."""


class UnknownFileError(SchedulerError):
    """The job stored no such file (404)."""


class UnknownMetricError(SchedulerError):
    """The learner's stored metric history has no series of that name (404)."""


class JobNotFoundError(UnknownJobError):
    """The tenant has no job with this id: a job of another tenant is reported the same way, never as forbidden."""


class AuthError(SchedulerError):
    """A request without a bearer token, or with one that is unknown or revoked."""


class TokensFileError(SchedulerError, ConfigError):
    """The tokens file cannot be read or written, or others can read it."""


class ManifestRejectedError(SchedulerError):
    """The scheduler refused a manifest; `problems` holds each problem as the server reported it."""

    def __init__(self, message: str, problems: list[dict[str, object]]) -> None:
        lines = [
            f"{p.get('file')}:{p.get('line')}: {p.get('field')}: {p.get('message')}"
            if p.get("line")
            else f"{p.get('file')}: {p.get('field')}: {p.get('message')}"
            for p in problems
        ]
        super().__init__("\n".join(lines) or message)
        self.problems = tuple(problems)


class ApiError(SchedulerError):
    """The scheduler answered with an error the client has no narrower type for; `status` is the HTTP code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class SchedulerUnreachableError(SchedulerError):
    """No answer from the scheduler's URL (refused, timed out, not HTTP)."""


class SettingsError(SchedulerError, ConfigError):
    """A scheduler setting (option or environment variable) that cannot be used."""


class ManifestTooLargeError(SchedulerError):
    """A manifest over the scheduler's size limit: refused before it is read."""


class RateLimitedError(SchedulerError):
    """Too many requests of one kind from one tenant, token or address; `retry_after_s` says when to try again."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StoreUnavailableError(SchedulerError):
    """etcd does not answer (an outage, a restart): the request may succeed if sent again later."""


class ClientGoneError(InvalidRequestError):
    """The client disconnected while its request body was read: nobody is left to answer."""


class UploadTimeoutError(SchedulerError):
    """A request body stalled past the idle timeout or ran past the total one (the API's 408)."""


class ModelCodeError(SchedulerError, ConfigError):
    """The model code (a folder or zip, its requirements.txt) is refused; the message names the file or line."""


class ModelTooLargeError(SchedulerError):
    """The uploaded model code is over the scheduler's limit (the API's 413)."""


def model_too_large(max_model_bytes: int) -> ModelTooLargeError:
    """In the API's words (a model sent whole, or a folder zipped by the console)."""
    return ModelTooLargeError(
        f"the model is over {max_model_bytes} bytes, the most this scheduler takes (LEARNERKIT_MAX_MODEL_BYTES)"
    )


def not_a_next_token(token: str) -> InvalidRequestError:
    """The words for a ``next`` that no list of this scheduler gave (the jobs', the sweeps')."""
    return InvalidRequestError(f"next: {token[:40]!r} is not a next token this scheduler gave")


def query_problems(details: Sequence[Mapping[str, Any]]) -> str:
    """A request's bad parameters (FastAPI's validation errors: ``loc``, ``msg``) in the words the API answers and
    the CLI prints (``query.limit: Input should be greater than or equal to 1``); the console's error page too."""
    return "; ".join(f"{'.'.join(str(part) for part in d['loc'])}: {d['msg']}" for d in details)
