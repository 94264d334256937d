"""What the sidecar saw go in and out of a learner, by SHA-256: the platform's half of a job's provenance.

The sidecar writes it beside the learner's outputs (``<learner prefix>/provenance/sidecar.json``, a key the learner
cannot reach: it holds no credentials) once the results are stored; the scheduler reads it when the job ends and
signs what it says (``learnerkit.scheduler.provenance``). Every digest was taken from the bytes as they streamed:
data as downloaded, results and the metric history as uploaded (docs/provenance.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from controller_sidecar.errors import PermanentError

RECORD_KEY = "provenance/sidecar.json"
"""Under the learner's outputs prefix."""
RECORD_VERSION = 1


class RecordError(PermanentError):
    """A sidecar record that cannot be read; the message names the field."""


@dataclass(frozen=True)
class Digested:
    name: str
    """An object's ``s3://bucket/key`` (inputs), or its key below the learner's prefix (outputs)."""
    sha256: str
    size: int


@dataclass(frozen=True)
class InstalledPackage:
    name: str
    version: str
    sha256: str | None
    """The wheel's digest where pip's install report gives one."""


@dataclass(frozen=True)
class SidecarRecord:
    learner_id: int
    data: tuple[Digested, ...] = ()
    model: Digested | None = None
    requirements: tuple[InstalledPackage, ...] = ()
    results: tuple[Digested, ...] = ()
    metrics: Digested | None = None
    restored_step: int | None = None
    """The checkpoint step this attempt resumed from, when it did."""
    restored_checkpoint: str | None = None
    """The SHA-256 of that checkpoint's marker (its files, sizes and ETags)."""

    def to_json(self) -> bytes:
        return json.dumps({"version": RECORD_VERSION, **asdict(self)}, sort_keys=True, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> SidecarRecord:
        try:
            document = json.loads(raw)
            if not isinstance(document, Mapping) or document.get("version") != RECORD_VERSION:
                raise RecordError(f"{where}: not a version {RECORD_VERSION} sidecar record")
            return cls(
                learner_id=int(document["learner_id"]),
                data=tuple(_digested(item) for item in document["data"]),
                model=_digested(document["model"]) if document.get("model") else None,
                requirements=tuple(
                    InstalledPackage(str(p["name"]), str(p["version"]), p.get("sha256"))
                    for p in document["requirements"]
                ),
                results=tuple(_digested(item) for item in document["results"]),
                metrics=_digested(document["metrics"]) if document.get("metrics") else None,
                restored_step=document.get("restored_step"),
                restored_checkpoint=document.get("restored_checkpoint"),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise RecordError(f"{where}: a field is missing or malformed: {e}") from e


def _digested(item: Any) -> Digested:
    return Digested(str(item["name"]), str(item["sha256"]), int(item["size"]))


def _package(item: Any) -> InstalledPackage:
    return InstalledPackage(str(item["name"]), str(item["version"]), item.get("sha256"))
