"""Errors of the build tool, all rooted at `BuildToolError`."""

from learnerkit.common.errors import ConfigError, LearnerkitError


class BuildToolError(LearnerkitError):
    """Root of the build tool's errors."""


class SpecError(BuildToolError, ConfigError):
    """A framework.yaml, or an image spec given on the command line, cannot be used."""


class TemplateError(BuildToolError, ConfigError):
    """A Dockerfile template failed to render; the message names the template, line and image."""


class BuildError(BuildToolError):
    """`docker build` failed; keeps the tail of the build log as evidence."""

    def __init__(self, image: str, reason: str, log_tail: str) -> None:
        super().__init__(f"build of {image} failed: {reason}\n--- last lines of the build log ---\n{log_tail}")
        self.image = image
        self.reason = reason
        self.log_tail = log_tail


class ImageTestError(BuildToolError):
    """An image test could not run at all (as opposed to a check that ran and failed)."""
