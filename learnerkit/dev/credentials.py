"""The dev S3 credentials: generated once, kept in ``credentials.env`` (mode 0600) across ``down`` and ``up``."""

from __future__ import annotations

import secrets
from pathlib import Path

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.errors import ConfigError

ACCESS_KEY_VAR = "AWS_ACCESS_KEY_ID"
SECRET_KEY_VAR = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 (a variable name)


def generate() -> dict[str, str]:
    return {ACCESS_KEY_VAR: f"lk{secrets.token_hex(8)}", SECRET_KEY_VAR: secrets.token_urlsafe(30)}


def read_credentials(path: Path) -> dict[str, str] | None:
    """The ``KEY=value`` lines of ``path``, or None when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    found = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    missing = {ACCESS_KEY_VAR, SECRET_KEY_VAR} - found.keys()
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(sorted(missing))}: remove it and run up again")
    return {ACCESS_KEY_VAR: found[ACCESS_KEY_VAR], SECRET_KEY_VAR: found[SECRET_KEY_VAR]}


def ensure_credentials(path: Path) -> dict[str, str]:
    """The stored credentials, generated and written (mode 0600) the first time."""
    existing = read_credentials(path)
    if existing is not None:
        return existing
    created = generate()
    lines = ["# learnerkit dev services: S3 credentials, generated once", *(f"{k}={v}" for k, v in created.items())]
    write_atomic(path, ("\n".join(lines) + "\n").encode(), mode=0o600)
    return created
