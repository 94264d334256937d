"""A sweep trial's parameters as a JSON file in the job folder: ``$JOB_STATE_DIR/parameters.json``.

The scheduler gives a trial its parameters as variables (one per parameter, and ``LEARNER_PARAMETERS``, all of
them as one JSON object); learner-run writes that object to the file, atomically, before the command starts,
for scripts that read their configuration from a file (docs/sweeps.md). Outside a sweep there is no file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from learner.run.errors import ConfigError, SetupError

PARAMETERS_ENV = "LEARNER_PARAMETERS"
PARAMETERS_FILE = "parameters.json"


def write_parameters_file(state_dir: Path, environ: Mapping[str, str]) -> Path | None:
    """The file written, or None without ``LEARNER_PARAMETERS``; `ConfigError` naming the variable when it is
    not a JSON object, `SetupError` when the folder cannot be written."""
    raw = environ.get(PARAMETERS_ENV, "")
    if not raw:
        return None
    try:
        parameters = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{PARAMETERS_ENV} must be a JSON object: {e}") from e
    if not isinstance(parameters, dict):
        raise ConfigError(f"{PARAMETERS_ENV} must be a JSON object, got {type(parameters).__name__}")
    target = state_dir / PARAMETERS_FILE
    data = (json.dumps(parameters, sort_keys=True) + "\n").encode()
    temp: str | None = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{PARAMETERS_FILE}.", suffix=".tmp", dir=state_dir)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), 0o644)
            out.flush()
            os.fsync(out.fileno())
        Path(temp).replace(target)
        temp = None
    except OSError as e:
        raise SetupError(f"cannot write {target}: {e.strerror or e}") from e
    finally:
        if temp is not None:  # not renamed into place: no half-written file is left
            Path(temp).unlink(missing_ok=True)
    return target
