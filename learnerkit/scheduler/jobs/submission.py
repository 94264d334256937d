"""What a submit carries beside the manifest: the ``--image`` override and the stored model code. Kept in the
job's spec in etcd, so a restarted scheduler deploys the job as it was submitted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelObject:
    """The model code archive in the job's results store; the sidecars expand it into ``MODEL_DIR``."""

    bucket: str
    key: str
    size: int
    requirements: bool
    """Whether it carries a ``requirements.txt`` the sidecars install."""


@dataclass(frozen=True)
class SubmitOptions:
    image: str | None = None
    """``job submit --image``: the learner image instead of the framework's."""
    model: ModelObject | None = None
    results_bucket: str | None = None
    """The scheduler's default results bucket when the job was submitted: a restart under another setting keeps
    the job's outputs where they are."""

    def to_raw(self) -> dict[str, Any]:
        model = self.model
        return {
            "image": self.image,
            "results_bucket": self.results_bucket,
            "model": None
            if model is None
            else {"bucket": model.bucket, "key": model.key, "size": model.size, "requirements": model.requirements},
        }

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any] | None) -> SubmitOptions:
        if not raw:
            return cls()
        model = raw.get("model")
        return cls(
            image=raw.get("image"),
            results_bucket=raw.get("results_bucket"),
            model=None
            if not model
            else ModelObject(str(model["bucket"]), str(model["key"]), int(model["size"]), bool(model["requirements"])),
        )
