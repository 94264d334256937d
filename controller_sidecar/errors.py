"""The sidecar's errors. Loops that retry (etcd, S3) retry only :class:`TransientError`."""

from __future__ import annotations

from controller_sidecar.rooterrors import ConfigError, LearnerkitError


class SidecarError(LearnerkitError):
    """Root of the sidecar's errors."""


class SidecarConfigError(SidecarError, ConfigError):
    """A bad setting; the message names the variable or the config file's field."""


class TransientError(SidecarError):
    """A failure worth retrying: a connection refused, a timeout, an HTTP 5xx or throttling answer."""

    def __init__(self, message: str, *, delay_s: float | None = None) -> None:
        super().__init__(message)
        self.delay_s = delay_s
        """The delay the server asked for (``Retry-After``), if any; the backoff never waits less."""


class HeldBackError(TransientError):
    """A write the sidecar itself holds back for now (its lease may have lapsed), not one the service refused:
    retried until the operation's deadline, without spending its attempts, which are for the service's failures
    (a learner that ends while its sidecar waits out an etcd blip still stores its results)."""


class PermanentError(SidecarError):
    """A failure that retrying cannot fix: access denied, no such bucket, a corrupt archive."""


class TransferError(PermanentError):
    """An object could not be transferred, or arrived different from what the store said it holds."""


class UnsafePathError(PermanentError):
    """An object key or archive member would land outside its directory, or an archive is too large."""


class UnsafeFileError(PermanentError):
    """A path under /job that the learner controls is a symbolic link or not a regular file: not read."""
