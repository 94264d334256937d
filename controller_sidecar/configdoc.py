"""The sidecar's config document as the hosts write it: the scheduler's planning for both backends and
``learnerkit sidecar run-local`` build a :class:`SidecarConfigDocument`, and
:func:`controller_sidecar.settings.load_settings` reads what :meth:`SidecarConfigDocument.to_raw` gives.

Deployed sidecars read this JSON, so its shape does not change: a field left None is left out of it and the
sidecar's default applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller_sidecar.requirements import PackageIndex


@dataclass(frozen=True)
class StoreFolder:
    """``{bucket, prefix}``: a folder of an S3 bucket."""

    bucket: str
    prefix: str = ""

    def to_raw(self) -> dict[str, str]:
        return {"bucket": self.bucket, "prefix": self.prefix}


@dataclass(frozen=True)
class StoreObject:
    """``{bucket, key}``: one object of an S3 bucket."""

    bucket: str
    key: str

    def to_raw(self) -> dict[str, str]:
        return {"bucket": self.bucket, "key": self.key}


@dataclass(frozen=True)
class TimingDocument:
    """The ``timing`` fields the hosts set (``settings.Timing`` has them all, with their defaults)."""

    halt_grace_s: float | None = None
    checkpoint_interval_s: float | None = None
    log_ship_interval_s: float | None = None

    def to_raw(self) -> dict[str, float]:
        fields = {
            "halt_grace_s": self.halt_grace_s,
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "log_ship_interval_s": self.log_ship_interval_s,
        }
        return {name: value for name, value in fields.items() if value is not None}


@dataclass(frozen=True)
class SidecarConfigDocument:
    """What one learner's sidecar is told (no secrets: those come from its environment)."""

    results: StoreFolder
    """Where this learner's results, logs and checkpoints go."""
    data: StoreFolder | None = None
    """Training data to download (``data.mode: copy``); None: ``mount``, the data is in place already."""
    model: StoreObject | None = None
    """The model code archive; None when the code is in the image."""
    resume_from: StoreFolder | None = None
    """The ``checkpoints/`` folder to restore before the learner starts."""
    trained_model: StoreFolder | None = None
    """An evaluation's input: the trained job's ``results/model/`` folder, downloaded into the model folder."""
    timing: TimingDocument = TimingDocument()
    evaluation_metrics: Mapping[str, Any] | None = None
    """The manifest's ``evaluation_metrics`` as given (FfDL form)."""
    requirements: PackageIndex | None = None
    """Where pip finds the model's ``requirements.txt``; None: it is not installed."""
    metrics_port: int | None = None
    status_sequence_start: int | None = None
    etcd_root: str | None = None
    """``etcd.root``: the prefix of the job store's keys."""
    held_attempt: int | None = None
    """``held.attempt``: the learner starts only once the job's release key reads this attempt (a preemptor's pair
    deployed while its victims checkpoint); None: it starts once the inputs are in."""

    def to_raw(self) -> dict[str, Any]:
        """The JSON document (``$LEARNERKIT_SIDECAR_CONFIG_JSON``)."""
        raw: dict[str, Any] = {
            "results": self.results.to_raw(),
            "data": {"mode": "copy", **self.data.to_raw()} if self.data is not None else {"mode": "mount"},
            "timing": self.timing.to_raw(),
        }
        optional: dict[str, Any] = {
            "model": self.model.to_raw() if self.model is not None else None,
            "resume_from": self.resume_from.to_raw() if self.resume_from is not None else None,
            "trained_model": self.trained_model.to_raw() if self.trained_model is not None else None,
            "evaluation_metrics": dict(self.evaluation_metrics) if self.evaluation_metrics else None,
            "requirements": self.requirements.to_config() if self.requirements is not None else None,
            "metrics_port": self.metrics_port,
            "status_sequence_start": self.status_sequence_start,
            "etcd": {"root": self.etcd_root} if self.etcd_root is not None else None,
            "held": {"attempt": self.held_attempt} if self.held_attempt is not None else None,
        }
        return raw | {name: value for name, value in optional.items() if value is not None}
