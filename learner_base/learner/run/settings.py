"""learner-run's settings, read once from argv and the environment into a frozen dataclass."""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from learner.halt import HALT_SIGNAL_ENV, signal_named
from learner.paths import env_path
from learner.run.errors import ConfigError

SHELL = "/bin/bash"
DEFAULT_HALT_GRACE_S = 30.0
DEFAULT_POLL_INTERVAL_S = 0.05


@dataclass(frozen=True)
class RunSettings:
    command: tuple[str, ...]
    """The argv to run: learner-run's own arguments, or ``bash -c "$LEARNER_COMMAND"``."""
    state_dir: Path
    """``$JOB_STATE_DIR``: where ``start`` and ``halt`` appear and ``learner.exit`` is written."""
    log_dir: Path
    """``$LOG_DIR``: ``learner.log`` gets every byte of the command's output."""
    start_timeout_s: float | None = None
    """``$LEARNER_START_TIMEOUT``: give up waiting for ``start`` after this long; None waits forever."""
    halt_signal: signal.Signals = signal.SIGTERM
    """``$LEARNER_HALT_SIGNAL``: sent to the command's process group on halt and on termination."""
    halt_grace_s: float = DEFAULT_HALT_GRACE_S
    """``$LEARNER_HALT_GRACE``: seconds between the halt signal and SIGKILL."""
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    """``$LEARNER_POLL_INTERVAL``: how often control files and the command are checked."""
    scrub: tuple[str, ...] = ()
    """``$LEARNER_SCRUB``: extra variable names or globs removed from the command's environment."""
    workdir: Path | None = None
    """``$MODEL_DIR``: the command runs there, as FfDL ran it (``cd $MODEL_DIR``), when it is a folder at
    start; else in learner-run's own working folder."""


def parse_seconds(variable: str, raw: str | None, *, positive: bool = False) -> float | None:
    """A duration in seconds from ``raw``; None when unset or blank."""
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        kind = "a positive" if positive else "a non-negative"
        raise ConfigError(f"{variable} must be {kind} number of seconds, got {raw!r}")
    return value


def parse_signal(variable: str, raw: str | None) -> signal.Signals:
    """A signal from a name (``SIGTERM``, ``TERM``, ``sigint``) or a number; unset gives SIGTERM."""
    try:
        return signal_named(raw)
    except ValueError:
        raise ConfigError(f"{variable} must be a signal name like SIGTERM or a number, got {raw!r}") from None


def command_from(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, ...]:
    """learner-run's arguments (after an optional ``--``), else ``$LEARNER_COMMAND`` run by bash."""
    args = list(argv[1:] if argv[:1] == ["--"] else argv)
    if args:
        return tuple(args)
    shell_command = environ.get("LEARNER_COMMAND", "")
    if shell_command.strip():
        return (SHELL, "-c", shell_command)
    raise ConfigError("no command: pass it as arguments (learner-run python train.py) or set LEARNER_COMMAND")


def settings_from(argv: Sequence[str], environ: Mapping[str, str]) -> RunSettings:
    """Build :class:`RunSettings`; raises :class:`ConfigError` naming the offending variable."""
    start_timeout = parse_seconds("LEARNER_START_TIMEOUT", environ.get("LEARNER_START_TIMEOUT"))
    grace = parse_seconds("LEARNER_HALT_GRACE", environ.get("LEARNER_HALT_GRACE"))
    poll = parse_seconds("LEARNER_POLL_INTERVAL", environ.get("LEARNER_POLL_INTERVAL"), positive=True)
    scrub = tuple(p.strip() for p in environ.get("LEARNER_SCRUB", "").split(",") if p.strip())
    return RunSettings(
        command=command_from(argv, environ),
        state_dir=env_path("JOB_STATE_DIR", environ),
        log_dir=env_path("LOG_DIR", environ),
        start_timeout_s=start_timeout,
        halt_signal=parse_signal(HALT_SIGNAL_ENV, environ.get(HALT_SIGNAL_ENV)),
        halt_grace_s=DEFAULT_HALT_GRACE_S if grace is None else grace,
        poll_interval_s=DEFAULT_POLL_INTERVAL_S if poll is None else poll,
        scrub=scrub,
        workdir=env_path("MODEL_DIR", environ),
    )
