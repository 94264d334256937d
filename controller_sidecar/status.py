"""Phases and status records of a learner, as the sidecar writes them to etcd."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypedDict


class Phase(StrEnum):
    QUEUED = "QUEUED"
    """Set by the scheduler before the learner is deployed."""
    PENDING = "PENDING"
    DOWNLOADING = "DOWNLOADING"
    PROCESSING = "PROCESSING"
    STORING = "STORING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    HALTED = "HALTED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({Phase.COMPLETED, Phase.FAILED, Phase.HALTED})


class ErrorCode(StrEnum):
    """Why a learner ended FAILED (or HALTED); ``error_code`` in the status record."""

    NONE = ""
    LEARNER_FAILED = "LEARNER_FAILED"
    """The training command exited non-zero."""
    LEARNER_KILLED = "LEARNER_KILLED"
    """The command died of a SIGKILL nobody asked for: usually out of memory (exit code 137)."""
    HALT_TIMEOUT = "HALT_TIMEOUT"
    """A halt was asked for and the command had to be killed after the grace period."""
    DOWNLOAD_FAILED = "DOWNLOAD_FAILED"
    UPLOAD_FAILED = "UPLOAD_FAILED"
    BAD_INPUT = "BAD_INPUT"
    """The job's data or model archive was refused (unsafe paths, too large, corrupt)."""
    LEARNER_LOST = "LEARNER_LOST"
    """The learner container ended without writing ``learner.exit``."""
    UNSAFE_FILE = "UNSAFE_FILE"
    """The learner put a symbolic link or special file where the sidecar reads its log, metrics or exit record."""
    SIDECAR_TERMINATED = "SIDECAR_TERMINATED"
    """The sidecar was told to stop (SIGTERM) before the learner ended."""
    CONFIG = "CONFIG"


class RawStatus(TypedDict):
    """The JSON value of ``learners/<n>/status`` and of each ``history/`` entry."""

    status: str
    timestamp: str
    error_code: str
    message: str
    exit_code: int | None
    learner_id: int
    sequence: int


@dataclass(frozen=True)
class StatusRecord:
    phase: Phase
    timestamp: datetime
    learner_id: int
    sequence: int
    """Per-learner counter, increasing with every record this learner's sidecars ever wrote."""
    error_code: ErrorCode = ErrorCode.NONE
    message: str = ""
    exit_code: int | None = None

    def to_raw(self) -> RawStatus:
        return RawStatus(
            status=self.phase.value,
            timestamp=self.timestamp.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            error_code=self.error_code.value,
            message=self.message,
            exit_code=self.exit_code,
            learner_id=self.learner_id,
            sequence=self.sequence,
        )

    def to_json(self) -> str:
        return json.dumps(self.to_raw(), sort_keys=True)

    @classmethod
    def from_raw(cls, raw: RawStatus) -> StatusRecord:
        return cls(
            phase=Phase(raw["status"]),
            timestamp=datetime.fromisoformat(raw["timestamp"].replace("Z", "+00:00")),
            learner_id=int(raw["learner_id"]),
            sequence=int(raw["sequence"]),
            error_code=ErrorCode(raw.get("error_code", "")),
            message=raw.get("message", ""),
            exit_code=raw.get("exit_code"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> StatusRecord:
        raw: RawStatus = json.loads(text)
        return cls.from_raw(raw)
