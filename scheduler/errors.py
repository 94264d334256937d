"""Errors of the scheduler, all rooted at `LearnerkitError`."""

from learnerkit.yamlfile import YamlError


class ManifestError(YamlError):
    """A manifest cannot be used; `problems` names the line and field path of every problem found."""
