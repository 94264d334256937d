"""The job's directories, each named by an environment variable with a fixed default under ``/job``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DIR_DEFAULTS: Mapping[str, str] = {
    "DATA_DIR": "/job/data",
    "MODEL_DIR": "/job/model",
    "RESULT_DIR": "/job/results",
    "CHECKPOINT_DIR": "/job/checkpoints",
    "LOG_DIR": "/job/logs",
    "JOB_STATE_DIR": "/job/control",
}
"""Variable -> default path. An unset or empty variable means the default."""
START_FILE = "start"
"""In ``$JOB_STATE_DIR``: the sidecar writes it when the inputs are in place; ``learner-run`` then starts."""
HALT_FILE = "halt"
"""In ``$JOB_STATE_DIR``: the sidecar writes it to ask the learner to checkpoint and stop."""


def env_path(variable: str, environ: Mapping[str, str] | None = None) -> Path:
    """The directory that ``variable`` names in ``environ`` (default ``os.environ``), or its default."""
    env = os.environ if environ is None else environ
    return Path(env.get(variable) or DIR_DEFAULTS[variable])


def data_dir() -> Path:
    """Training data (``$DATA_DIR``, default ``/job/data``); may be read-only."""
    return env_path("DATA_DIR")


def model_dir() -> Path:
    """The user's model code (``$MODEL_DIR``, default ``/job/model``)."""
    return env_path("MODEL_DIR")


def result_dir() -> Path:
    """Results to keep (``$RESULT_DIR``, default ``/job/results``); uploaded when the learner ends."""
    return env_path("RESULT_DIR")


def checkpoint_dir() -> Path:
    """Checkpoints (``$CHECKPOINT_DIR``, default ``/job/checkpoints``); uploaded, restored on resume."""
    return env_path("CHECKPOINT_DIR")


def log_dir() -> Path:
    """Logs (``$LOG_DIR``, default ``/job/logs``): ``learner.log`` and ``metrics.jsonl``."""
    return env_path("LOG_DIR")


def state_dir() -> Path:
    """Control files shared with the sidecar (``$JOB_STATE_DIR``, default ``/job/control``)."""
    return env_path("JOB_STATE_DIR")
