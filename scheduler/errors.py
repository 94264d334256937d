"""The scheduler's errors, all under learnerkit's one root."""

from __future__ import annotations

from learnerkit.errors import LearnerkitError


class SchedulerError(LearnerkitError):
    """A scheduler operation that cannot go on; the message names the job or object at fault."""


class InvalidObjectError(SchedulerError):
    """A generated Kubernetes object does not validate against the pinned Kubernetes schema."""


class BackendError(SchedulerError):
    """The cluster (or engine) refused or failed an operation on a named object."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status the API answered with; None when it could not be reached at all."""
