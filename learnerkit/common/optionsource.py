"""Which option or variable gave the running command a value: an error about a file names what supplied it."""

from __future__ import annotations

import click
from click.core import ParameterSource


def given_by(name: str, option: str, envvar: str | None = None) -> str:
    """``option`` when the command line gave parameter ``name``, ``envvar`` when the environment did; both (``--key
    or LEARNERKIT_SIGNING_KEY``) when it is the default: either one changes it."""
    source = click.get_current_context().get_parameter_source(name)
    if source is ParameterSource.COMMANDLINE or envvar is None:
        return option
    if source is ParameterSource.ENVIRONMENT:
        return envvar
    return f"{option} or {envvar}"
