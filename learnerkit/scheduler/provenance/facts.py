"""What a job's provenance states, gathered before anything is signed: plain data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller_sidecar.provenancerecord import Digested, InstalledPackage
from learnerkit.scheduler.provenance.attempts import AttemptFact
from learnerkit.scheduler.provenance.records import MissingRecord


@dataclass(frozen=True)
class ImageFact:
    reference: str
    """As the job ran it (``learnerkit/pytorch:2.3-cpu-py3.11``, or the submit's ``--image``)."""
    digest: str
    """``sha256:<hex>``: the image ID the engine ran (a registry digest where the backend pulls by one)."""
    records: dict[str, str] = field(default_factory=dict)
    """The build tool's records of the image by SHA-256 of their files: ``sbom``, ``scan``."""
    verdict: str | None = None
    """The scan gate's verdict from the scan record (``passed``, ``failed``), where there is one."""


@dataclass(frozen=True)
class JobFacts:
    job_id: str
    tenant: str
    status: str
    """How the job ended: COMPLETED, or HALTED/FAILED for what those attempts produced."""
    manifest: dict[str, Any]
    """The manifest as submitted, without credentials (``JobManifest.to_dict()``)."""
    command: str
    learner_image: ImageFact
    sidecar_image: ImageFact | None
    instance: str
    """The scheduler instance that ran the job."""
    results: tuple[Digested, ...]
    """Every result file, named by its path below the job's prefix."""
    data: tuple[Digested, ...] = ()
    data_prefix: str = ""
    """``s3://bucket/prefix/`` of the training data: a data object's path below it is where a local copy holds it."""
    model_code: Digested | None = None
    """The model code archive, named by its path below the job's prefix (``model/model.zip``)."""
    requirements: tuple[InstalledPackage, ...] = ()
    metric_histories: tuple[Digested, ...] = ()
    logs: tuple[Digested, ...] = ()
    """Each learner's log, its parts taken in order as one stream."""
    attempts: tuple[AttemptFact, ...] = ()
    sweep_parameters: dict[str, Any] = field(default_factory=dict)
    missing: tuple[MissingRecord, ...] = ()
    """The learners of attempts whose sidecar record the platform does not hold: the statement is incomplete."""
