"""Times as users write them (ISO-8601) read into epoch seconds, for the CLI and the API alike."""

from __future__ import annotations

from datetime import UTC, datetime

from learnerkit.common.errors import ConfigError


def parse_instant(field: str, text: str | None) -> float | None:
    """An ISO-8601 time as epoch seconds (UTC when it names no zone); None for none; `ConfigError` naming
    ``field`` for anything else."""
    if text is None or not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigError(f"{field}: expected an ISO-8601 time such as 2026-11-28T12:00:00Z; got {text!r}") from e
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
