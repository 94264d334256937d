"""A job's provenance as an in-toto Statement v1 with a SLSA provenance v1 predicate.

Subjects: every result file and its SHA-256, named by its path below the job's prefix (as `job download` writes
it); a job without result files has the manifest document as its one subject (annotated ``kind: manifest``), so
the statement still says what the platform ran and how it went, and a Statement never has an empty subject.
Resolved dependencies: the learner and sidecar images by digest (the learner image's SBOM and scan records by the
digests of the build tool's files), each training data object, the model code archive and every installed
requirement. External parameters: the manifest without credentials, tenant, command. Run details: the scheduler
instance, every attempt (a byproduct whose ``content`` is the attempts' JSON, as a ResourceDescriptor must carry
a uri, digest or content), and as byproducts the manifest document, the metric histories and the logs
(evaluation rounds are signed later, each in a statement of its own: `provenance.evaluation`).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from learnerkit import __version__
from learnerkit.common.signing import STATEMENT_TYPE, canonical
from learnerkit.scheduler.provenance.attempts import ATTEMPTS
from learnerkit.scheduler.provenance.facts import ImageFact, JobFacts

__all__ = ["ATTEMPTS", "PREDICATE_TYPE", "manifest_document", "provenance_statement"]

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://learnerkit.dev/buildtypes/training-job/v1"
BUILDER_ID = "https://learnerkit.dev/builders/scheduler/v1"
MANIFEST_FILE = "provenance/manifest.json"
"""The manifest as submitted without credentials, canonical JSON, stored beside the provenance."""
LEARNER_IMAGE = "learner-image"
SIDECAR_IMAGE = "sidecar-image"


def manifest_document(facts: JobFacts) -> bytes:
    return canonical(facts.manifest)


def provenance_statement(facts: JobFacts, manifest_sha256: str) -> dict[str, Any]:
    subject = [{"name": r.name, "digest": {"sha256": r.sha256}} for r in facts.results] or [
        {"name": MANIFEST_FILE, "digest": {"sha256": manifest_sha256}, "annotations": {"kind": "manifest"}}
    ]
    return {
        "_type": STATEMENT_TYPE,
        "subject": subject,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": _external(facts),
                "internalParameters": _internal(facts),
                "resolvedDependencies": _dependencies(facts),
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"learnerkit": __version__, "instance": facts.instance}},
                "metadata": _metadata(facts),
                "byproducts": _byproducts(facts, manifest_sha256),
            },
        },
    }


def _external(facts: JobFacts) -> dict[str, Any]:
    external: dict[str, Any] = {"manifest": facts.manifest, "tenant": facts.tenant, "command": facts.command}
    if facts.sweep_parameters:
        external["sweepParameters"] = facts.sweep_parameters
    return external


def _internal(facts: JobFacts) -> dict[str, Any]:
    """Whether every learner of every attempt is accounted for: ``complete`` false names each one without a
    record the platform holds (its results, if any, are not signed)."""
    internal: dict[str, Any] = {"jobId": facts.job_id, "status": facts.status, "complete": not facts.missing}
    if facts.missing:
        internal["missingRecords"] = [gap.to_dict() for gap in facts.missing]
    return internal


def _image(name: str, image: ImageFact) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "uri": f"docker-image://{image.reference}"}
    if image.digest:
        algorithm, _, hexdigest = image.digest.partition(":")
        found["digest"] = {algorithm: hexdigest}
    annotations: dict[str, Any] = {f"{kind}Sha256": digest for kind, digest in sorted(image.records.items())}
    if image.verdict is not None:
        annotations["scanVerdict"] = image.verdict
    if annotations:
        found["annotations"] = annotations
    return found


def _dependencies(facts: JobFacts) -> list[dict[str, Any]]:
    found = [_image(LEARNER_IMAGE, facts.learner_image)]
    if facts.sidecar_image is not None:
        found.append(_image(SIDECAR_IMAGE, facts.sidecar_image))
    found += [
        {
            "name": f"data:{d.name}",
            "uri": d.name,
            "digest": {"sha256": d.sha256},
            "annotations": {"size": d.size, "path": d.name.removeprefix(facts.data_prefix)},
        }
        for d in facts.data
    ]
    if facts.model_code is not None:
        code = facts.model_code
        found.append({"name": code.name, "digest": {"sha256": code.sha256}, "annotations": {"size": code.size}})
    for package in facts.requirements:
        requirement: dict[str, Any] = {
            "name": f"pypi:{package.name}",
            "uri": f"pkg:pypi/{package.name}@{package.version}",
        }
        if package.sha256:
            requirement["digest"] = {"sha256": package.sha256}
        found.append(requirement)
    return found


def _metadata(facts: JobFacts) -> dict[str, Any]:
    metadata: dict[str, Any] = {"invocationId": facts.job_id}
    if facts.attempts:
        metadata["startedOn"] = facts.attempts[0].started_at
        if facts.attempts[-1].ended_at:
            metadata["finishedOn"] = facts.attempts[-1].ended_at
    return metadata


def _byproducts(facts: JobFacts, manifest_sha256: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {"name": MANIFEST_FILE, "digest": {"sha256": manifest_sha256}, "mediaType": "application/json"}
    ]
    found += [
        {"name": m.name, "digest": {"sha256": m.sha256}, "mediaType": "application/x-ndjson"}
        for m in facts.metric_histories
    ]
    found += [{"name": log.name, "digest": {"sha256": log.sha256}, "mediaType": "text/plain"} for log in facts.logs]
    attempts = [attempt.to_dict() for attempt in facts.attempts]
    content = canonical(attempts)
    found.append(
        {
            "name": ATTEMPTS,
            "mediaType": "application/json",
            "content": base64.b64encode(content).decode(),
            "digest": {"sha256": hashlib.sha256(content).hexdigest()},
            "annotations": {"attempts": attempts},
        }
    )
    return found
