"""Training metrics as JSON lines in ``$LOG_DIR/metrics.jsonl``, which the sidecar tails.

Each call appends exactly one line, ``{"step": 40, "time": 1718000000.5, "values": {"loss": 0.25}}``,
with a single ``write`` on a file opened with ``O_APPEND``: concurrent writers never interleave within a
line and a reader never sees half a line from this writer.

In a sweep trial, logging the rung budget's step (``LEARNER_BUDGET``; in epochs, the epoch the script logs
as its step) halts the trial there (:func:`learner.halt.halt_at_budget`).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import time

from learner.budget import budget
from learner.halt import halt_at_budget
from learner.paths import log_dir

METRICS_FILE = "metrics.jsonl"

_last: dict[str, tuple[int, int | float]] = {}
"""Each metric's last (step, value) logged by this process: what ``next_budget`` tells the scheduler."""


def last_values() -> dict[str, tuple[int, int | float]]:
    """Each metric's last ``(step, value)`` that this process logged."""
    return dict(_last)


def _checked(key: str, value: object) -> int | float:
    # numbers.Real admits numpy scalars (np.float32 is not a float); bool is an int but never a metric.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        # ValueError, not TypeError: the contract promises one exception type for every bad value.
        raise ValueError(  # noqa: TRY004
            f"metric {key!r} must be a real number, got {type(value).__name__} (use .item() on a tensor)"
        )
    if isinstance(value, int):
        return value
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"metric {key!r} must be finite, got {number}")
    return number


def log_metrics(step: int, **values: float) -> None:
    """Append one metrics line for ``step``.

    Raises ``ValueError`` (naming the key) for a value that is not a finite real number, for a step that
    is not a non-negative int, or when no values are given. Prints nothing. A step at or past a sweep trial's
    budget halts the trial once the line is written (``halt_requested()`` turns true).

    >>> log_metrics(40, loss=0.25, accuracy=0.91)  # doctest: +SKIP
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if not values:
        raise ValueError("log_metrics needs at least one value, e.g. log_metrics(step, loss=0.5)")
    checked = {k: _checked(k, v) for k, v in values.items()}
    record = {"step": step, "time": time.time(), "values": checked}
    limit = budget()  # a bad LEARNER_BUDGET raises before anything is written
    line = (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode()
    directory = log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / METRICS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        written = os.write(fd, line)
        # A short write on a regular file only happens on a full disk or a signal; finish the line anyway.
        while written < len(line):
            written += os.write(fd, line[written:])
    finally:
        os.close(fd)
    _last.update((key, (step, value)) for key, value in checked.items())
    if limit is not None and limit.reached(step):
        halt_at_budget(step, limit.limit)
