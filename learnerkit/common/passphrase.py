"""Where the platform's signing key's passphrase comes from: the environment only (never an option, so it never
shows in a process list), given itself or as a file (a mounted secret). Kept apart from `signing` so reading the
settings costs no cryptography import."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from learnerkit.common.errors import ConfigError

PASSPHRASE_SETTING = "LEARNERKIT_SIGNING_KEY_PASSPHRASE"  # noqa: S105 (the variable's name)
PASSPHRASE_FILE_SETTING = "LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE"  # noqa: S105 (the variable's name)


def key_passphrase(env: Mapping[str, str]) -> bytes | None:
    """The signing key's passphrase: ``$LEARNERKIT_SIGNING_KEY_PASSPHRASE``, or the first line of the file
    ``$LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE`` (a mounted secret); None when neither is set (an unencrypted key)."""
    given, file = env.get(PASSPHRASE_SETTING), env.get(PASSPHRASE_FILE_SETTING)
    if given and file:
        raise ConfigError(f"set {PASSPHRASE_SETTING} or {PASSPHRASE_FILE_SETTING}, not both")
    if file:
        try:
            lines = Path(file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{PASSPHRASE_FILE_SETTING}={file}: cannot read the passphrase: {e}") from e
        given = lines[0] if lines else ""
        if not given:
            raise ConfigError(f"{PASSPHRASE_FILE_SETTING}={file}: the file holds no passphrase (its first line)")
    return given.encode() if given else None
