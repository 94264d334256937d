"""Errors of the local services; all derive from the one learnerkit root."""

from __future__ import annotations

from learnerkit.common.errors import LearnerkitError


class ServiceError(LearnerkitError):
    """A service did not start, answer or stop; the message names it and ends with its log's tail."""


class PortTakenError(ServiceError):
    """A server exited because one of its ports was bound by another process first (free ports are chosen, then
    bound later: a race with any other program on the host)."""
