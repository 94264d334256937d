"""Cooperative halting: a training script polls :func:`halt_requested` and checkpoints, then exits.

``learner-run`` signals the command's process group (SIGTERM unless ``LEARNER_HALT_SIGNAL`` says
otherwise) when the sidecar writes ``$JOB_STATE_DIR/halt``. :func:`install_halt_handler` turns SIGTERM and
SIGINT into a flag instead of an immediate exit, so the script can finish its step and save.

A sweep trial is also halted at its rung's budget by the helper itself (:func:`halt_at_budget`, called by
``log_metrics``): a script that honours halts but never reads ``learner.budget()`` still stops at that step.
A trial promoted in place at that step (``learner.next_budget``) takes that halt back (:func:`resume_after_budget`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from types import FrameType

from learner.atomicfile import write_text
from learner.paths import BUDGET_REACHED_FILE, HALT_FILE, state_dir

HALT_SIGNAL_ENV = "LEARNER_HALT_SIGNAL"

_halt_signal: int | None = None
_budget_reached = False
_signals = 0
"""Halt signals this process's handler has taken (``install_halt_handler``'s)."""
_signals_by_budget = 0
"""How many of them :func:`halt_at_budget` raised itself: a promotion in place takes back only those."""


def _on_halt_signal(signum: int, _frame: FrameType | None) -> None:
    global _halt_signal, _signals
    _halt_signal = signum
    _signals += 1


def signals_taken() -> int:
    """How many halt signals the handler of :func:`install_halt_handler` has taken in this process."""
    return _signals


def install_halt_handler() -> None:
    """Make SIGTERM and SIGINT set the halt flag instead of ending the process. Call from the main thread."""
    signal.signal(signal.SIGTERM, _on_halt_signal)
    signal.signal(signal.SIGINT, _on_halt_signal)


def halt_requested() -> bool:
    """True after a halt signal (see :func:`install_halt_handler`), once ``log_metrics`` has logged the rung
    budget's step, or when ``$JOB_STATE_DIR/halt`` (or ``budget.reached``) exists."""
    if _halt_signal is not None or _budget_reached:
        return True
    folder = state_dir()
    return (folder / HALT_FILE).exists() or (folder / BUDGET_REACHED_FILE).exists()


def signal_named(raw: str | None) -> signal.Signals:
    """A signal from a name (``SIGTERM``, ``TERM``, ``sigint``) or a number; unset or blank gives SIGTERM.
    Raises ``ValueError`` for anything else."""
    if raw is None or not raw.strip():
        return signal.SIGTERM
    text = raw.strip()
    try:
        if text.isdigit():
            return signal.Signals(int(text))
        name = text.upper()
        return signal.Signals[name if name.startswith("SIG") else "SIG" + name]
    except (KeyError, ValueError):
        raise ValueError(f"not a signal: {raw!r}") from None


def halt_at_budget(step: int, limit: int) -> None:
    """The rung's budget is reached at ``step``: halt as the sidecar's halt would, once per process.

    ``halt_requested()`` turns true, here and (through ``$JOB_STATE_DIR/budget.reached``) in the command's
    other processes; then the halt signal is raised in this process where the script has a handler for it
    (``install_halt_handler``'s or its own), which runs as on a real halt. Without one the signal is not
    raised: it would end the process before it could checkpoint. The script then checkpoints and exits 0:
    its job ends COMPLETED, which the sweep takes as the rung's result (no halt was asked of the platform).
    """
    global _budget_reached
    if _budget_reached:
        return
    _budget_reached = True
    folder = state_dir()
    if folder.is_dir():  # outside learner-run (a script run by hand) there may be no control folder
        record = {"step": step, "budget": limit}
        with contextlib.suppress(OSError):  # training goes on; the halt in this process still holds
            write_text(folder / BUDGET_REACHED_FILE, json.dumps(record, sort_keys=True) + "\n")
    try:
        signum = signal_named(os.environ.get(HALT_SIGNAL_ENV))
    except ValueError:
        return  # learner-run refuses a bad value before the command starts: only a script run by hand gets here
    handler = signal.getsignal(signum)
    if callable(handler) and handler is not signal.default_int_handler:
        global _signals_by_budget
        signal.raise_signal(signum)
        _signals_by_budget = _signals


def resume_after_budget() -> None:
    """The trial was promoted in place (``learner.next_budget``): take back what :func:`halt_at_budget` did, so
    ``halt_requested()`` is False again, unless a real halt came (a signal since, or ``control/halt``)."""
    global _budget_reached, _halt_signal
    _budget_reached = False
    if _halt_signal is not None and _signals == _signals_by_budget:
        _halt_signal = None
    with contextlib.suppress(OSError):
        (state_dir() / BUDGET_REACHED_FILE).unlink(missing_ok=True)
