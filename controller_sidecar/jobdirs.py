"""The job volume's folders, as the sidecar and the learner both mount it.

The sidecar image does not ship the learner's ``learner.paths``, so the names are spelled here again; a unit
test keeps the two equal (tests/unit/house/test_job_folders.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

JOB_DIR = Path("/job")
"""Where the job volume is mounted, in the learner as in the sidecar."""


@dataclass(frozen=True)
class JobDirs:
    """The job volume's folders under ``root`` (the learner contract, docs/learner-contract.md)."""

    root: Path = JOB_DIR

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def packages(self) -> Path:
        """The model's requirements, installed by the sidecar; the learner's ``PYTHONPATH`` names it."""
        return self.root / "packages"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def control(self) -> Path:
        return self.root / "control"

    @property
    def shared(self) -> Path:
        """FfDL's job folder (``JOB_SHARED_DIR``): a volume of the job's own mounted over it in the learner when
        the job has several learners; for one learner, this folder of the learner's own volume."""
        return self.root / "shared"

    def learner_variables(self) -> dict[str, Path]:
        """The learner's folder variables (``learner-run`` sets them) and their folders here."""
        return {
            "DATA_DIR": self.data,
            "MODEL_DIR": self.model,
            "RESULT_DIR": self.results,
            "CHECKPOINT_DIR": self.checkpoints,
            "LOG_DIR": self.logs,
            "JOB_STATE_DIR": self.control,
        }
