"""What this learner's sidecars have done so far, kept in ``control/`` so a restarted sidecar goes on.

Each phase is idempotent; this record lets a restart skip what is complete (the data download keeps its
own per-object record and resumes mid-way).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from controller_sidecar.atomicfile import read_json, write_json_atomic

PROGRESS_FILE = "sidecar-progress.json"


@dataclass(frozen=True)
class Progress:
    inputs_ready: bool = False
    """Data, model code and (on resume) the checkpoint are in place."""
    restored_step: int | None = None
    started: bool = False
    """``control/start`` was written."""
    halt_requested: bool = False
    storing_starts: int = 0
    """How many sidecars of this learner began storing its outputs: past one, an earlier one was cut off."""
    terminal: str | None = None
    """The terminal phase reported, once reported."""


class ProgressFile:
    def __init__(self, control_dir: Path) -> None:
        self.path = control_dir / PROGRESS_FILE
        raw = read_json(self.path)
        self.current = Progress(**raw) if isinstance(raw, dict) else Progress()

    def update(self, **changes: object) -> Progress:
        self.current = replace(self.current, **changes)  # type: ignore[arg-type]
        write_json_atomic(self.path, asdict(self.current))
        return self.current
