"""The root of every learnerkit error, host and sidecar alike.

It lives in the sidecar, the lowest package the host and the sidecar share, so the sidecar image ships no
host module; ``learnerkit.common.errors`` re-exports both classes for the host.
"""


class LearnerkitError(Exception):
    """An error a user can act on: the message names the file, field, image or command at fault."""


class ConfigError(LearnerkitError):
    """Bad input: a file, field or command-line value that cannot be used."""
