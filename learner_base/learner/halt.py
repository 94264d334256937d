"""Cooperative halting: a training script polls :func:`halt_requested` and checkpoints, then exits.

``learner-run`` signals the command's process group (SIGTERM unless ``LEARNER_HALT_SIGNAL`` says
otherwise) when the sidecar writes ``$JOB_STATE_DIR/halt``. :func:`install_halt_handler` turns SIGTERM and
SIGINT into a flag instead of an immediate exit, so the script can finish its step and save.
"""

from __future__ import annotations

import signal
from types import FrameType

from learner.paths import HALT_FILE, state_dir

_halt_signal: int | None = None


def _on_halt_signal(signum: int, _frame: FrameType | None) -> None:
    global _halt_signal
    _halt_signal = signum


def install_halt_handler() -> None:
    """Make SIGTERM and SIGINT set the halt flag instead of ending the process. Call from the main thread."""
    signal.signal(signal.SIGTERM, _on_halt_signal)
    signal.signal(signal.SIGINT, _on_halt_signal)


def halt_requested() -> bool:
    """True after a halt signal (see :func:`install_halt_handler`) or when ``$JOB_STATE_DIR/halt`` exists."""
    return _halt_signal is not None or (state_dir() / HALT_FILE).exists()
