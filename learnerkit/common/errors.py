"""The one exception root of learnerkit; each package derives its own errors from it."""


class LearnerkitError(Exception):
    """An error a user can act on: the message names the file, field, image or command at fault."""


class ConfigError(LearnerkitError):
    """Bad input: a file, field or command-line value that cannot be used."""


class ToolMissingError(LearnerkitError):
    """An external program the operation needs is not installed or does not run."""
