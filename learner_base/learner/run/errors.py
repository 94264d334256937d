"""learner-run's errors: each one is an expected condition, reported as one line without a traceback."""

from __future__ import annotations


class LearnerRunError(Exception):
    """Root of learner-run's errors; the message is shown to the user after ``learner-run: ``."""


class ConfigError(LearnerRunError):
    """A bad command line or environment value; the message names the variable."""


class SetupError(LearnerRunError):
    """The job's directories or files cannot be created or written."""
