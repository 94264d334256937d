"""The job's directories, each named by an environment variable with a fixed default under ``/job``.

The names of the learner contract (docs/learner-contract.md): the host's deployers mount and name the folders
from here; the sidecar, whose image does not ship this package, spells them in ``controller_sidecar.jobdirs``
and ``controller_sidecar.control``, and a unit test keeps the two equal.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

JOB_DIR = "/job"
"""Where the job volume is mounted, in the learner as in the sidecar."""
DIR_DEFAULTS: Mapping[str, str] = {
    "DATA_DIR": f"{JOB_DIR}/data",
    "MODEL_DIR": f"{JOB_DIR}/model",
    "RESULT_DIR": f"{JOB_DIR}/results",
    "CHECKPOINT_DIR": f"{JOB_DIR}/checkpoints",
    "LOG_DIR": f"{JOB_DIR}/logs",
    "JOB_STATE_DIR": f"{JOB_DIR}/control",
}
"""Variable -> default path. An unset or empty variable means the default."""
SHARED_DIR = f"{JOB_DIR}/shared"
"""``$JOB_SHARED_DIR``: FfDL's job folder, one volume every learner of a job mounts here."""
PACKAGES_DIR = f"{JOB_DIR}/packages"
"""The model's ``requirements.txt``, installed here by the sidecar; the learner's ``PYTHONPATH`` names it."""
START_FILE = "start"
"""In ``$JOB_STATE_DIR``: the sidecar writes it when the inputs are in place; ``learner-run`` then starts."""
HALT_FILE = "halt"
"""In ``$JOB_STATE_DIR``: the sidecar writes it to ask the learner to checkpoint and stop."""
EXIT_FILE = "learner.exit"
"""In ``$JOB_STATE_DIR``: ``learner-run`` writes how the command ended; the sidecar reads it."""
BUDGET_REACHED_FILE = "budget.reached"
"""In ``$JOB_STATE_DIR``: the helper writes it once ``log_metrics`` has logged the rung budget's step, for the
command's other processes (``halt_requested``); ``learner-run`` removes one left by an earlier run."""
BUDGET_WAIT_FILE = "budget.wait"
"""In ``$JOB_STATE_DIR``: the helper writes it at a rung's budget to ask for the next one (``next_budget``):
``{"step": 30, "budget": 30, "metrics": {"val_loss": [30, 0.25]}}``; the sidecar passes it to the scheduler."""
BUDGET_NEXT_FILE = "budget.next"
"""In ``$JOB_STATE_DIR``: the sidecar writes the scheduler's answer, ``{"step": 30, "budget": 90}`` (promoted in
place) or ``{"step": 30, "budget": null, "reason": "..."}`` (checkpoint and end the rung as before)."""


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
