"""`job verify`: a downloaded job folder checked against its signed provenance, naming every item that changed.

The envelope must verify with the platform's public key; then every file the provenance names that the folder
holds is hashed again (results, the manifest document, the model code archive, metric histories, logs,
evaluations; training data from a local copy when one is given), the model signature must be the platform's and
list the same results, and the images must still be what the engine (or registry) has under their references.
Each evaluation round's statement (``provenance/evaluation-round-<r>.intoto.json``) must be the platform's, name
the same model, and its reports and evaluator images are checked the same way. The factsheet must be the one the
signed statements render.

Strict: a signed subject the folder does not hold is ``missing``, and a statement that says it is incomplete (a
learner's record was not in the platform's hands) fails too, unless ``partial`` asks to verify what is there. Files
no statement names (checkpoints, the tenant's own files) are listed as ``unsigned`` without failing; byproducts and
dependencies the folder does not hold are ``not checked``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key

from learnerkit.common.errors import LearnerkitError
from learnerkit.common.signing import EnvelopeError, open_envelope, open_signed
from learnerkit.scheduler.provenance.evaluation import PREDICATE_TYPE as EVALUATION_PREDICATE
from learnerkit.scheduler.provenance.evaluation import ROUND_PREFIX, ROUND_SUFFIX, round_file, round_of, round_summary
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON, FACTSHEET_MD
from learnerkit.scheduler.provenance.factsheetcheck import factsheet_checks
from learnerkit.scheduler.provenance.modelsig import BUNDLE_MEDIA_TYPE, SIGNATURE_FILE
from learnerkit.scheduler.provenance.modelsig import PREDICATE_TYPE as MODEL_PREDICATE
from learnerkit.scheduler.provenance.report import Check, State, VerifyReport
from learnerkit.scheduler.provenance.statement import (
    ATTEMPTS,
    LEARNER_IMAGE,
    MANIFEST_FILE,
    PREDICATE_TYPE,
    SIDECAR_IMAGE,
)

__all__ = ["Check", "State", "VerifyReport", "verify_folder"]

PROVENANCE_FILE = "provenance/provenance.intoto.json"
PLATFORM_DOCUMENTS = (PROVENANCE_FILE, SIGNATURE_FILE, MANIFEST_FILE, FACTSHEET_JSON, FACTSHEET_MD)
EVALUATOR_IMAGE = "evaluator-image"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageAnswer:
    """What an engine or registry holds under an image reference."""

    source: str
    """Who answered: ``the engine``, ``registry 127.0.0.1:5000``."""
    digests: frozenset[str] = frozenset()
    """``sha256:<hex>`` each: the image ID, and from a registry the manifest's digest too; empty where it has none."""
    problem: str = ""
    """Why it could not be asked (unreachable, refused); then ``digests`` is empty."""


ImageLookup = Callable[[str], ImageAnswer]


@dataclass(frozen=True)
class DataAnswer:
    """An evaluation data object hashed again from its store."""

    sha256: str = ""
    problem: str = ""
    """Why it could not be read (the store no longer has it, none answers); then ``sha256`` is empty."""


DataLookup = Callable[[str], DataAnswer]
"""``s3://bucket/key`` -> its SHA-256 as the store holds it now (`job verify JOB`: through the scheduler)."""


class NoProvenanceError(LearnerkitError):
    """The folder holds no provenance to verify."""


Hasher = Callable[[Sequence[Path]], str]


def sha256_of(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


_HASHER: ContextVar[Hasher] = ContextVar("hasher")


def verify_folder(
    folder: Path,
    keys: Key | Sequence[Key],
    *,
    data: Path | None = None,
    image_digest: ImageLookup | None = None,
    evaluation_data: DataLookup | None = None,
    partial: bool = False,
    hasher: Hasher | None = None,
) -> VerifyReport:
    """``hasher``: the SHA-256 of a file's bytes (of several, concatenated), where the caller knows some already
    (the console's trust panel keeps those of files unchanged since its last check); default: read and hash."""
    chosen = _HASHER.set(hasher or sha256_of)
    try:
        return _verified(folder, keys, data, image_digest, evaluation_data, partial)
    finally:
        _HASHER.reset(chosen)


def _verified(
    folder: Path,
    keys: Key | Sequence[Key],
    data: Path | None,
    image_digest: ImageLookup | None,
    evaluation_data: DataLookup | None,
    partial: bool,
) -> VerifyReport:
    envelope_path = folder / PROVENANCE_FILE
    if not envelope_path.is_file():
        raise NoProvenanceError(
            f"{folder}: no provenance here ({PROVENANCE_FILE} is missing): "
            "`learnerkit job download JOB --what provenance` fetches it"
        )
    ring = [keys] if isinstance(keys, Key) else list(keys)
    report = VerifyReport(str(folder), ring[0].keyid if ring else "", partial=partial)
    try:
        statement, key = open_signed(envelope_path.read_bytes(), ring, PROVENANCE_FILE)
    except EnvelopeError as e:
        report.checks.append(Check("provenance signature", State.CHANGED, str(e)))
        return report
    report.key_id = key.keyid
    if statement.get("predicateType") != PREDICATE_TYPE:
        report.checks.append(Check("provenance signature", State.CHANGED, "not a SLSA provenance v1 statement"))
        return report
    report.checks.append(Check("provenance signature", State.OK, f"signed by {key.keyid}"))
    predicate = statement["predicate"]
    report.checks.append(_completeness_check(predicate))
    signed = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"] if not _is_manifest(s)}
    for name, sha256 in sorted(signed.items()):
        kind = "result" if name in subjects else "subject"
        report.checks.append(_file_check(f"{kind} {name}", [folder / name], sha256, absent=State.MISSING))
    report.checks.append(_model_signature_check(folder, ring, subjects))
    for byproduct in predicate["runDetails"].get("byproducts", []):
        if byproduct.get("name") != ATTEMPTS and "digest" in byproduct:
            report.checks.append(_byproduct_check(folder, byproduct))
    for dependency in predicate["buildDefinition"]["resolvedDependencies"]:
        report.checks += _dependency_checks(folder, dependency, data, image_digest)
    rounds: list[dict[str, Any]] = []
    """Each round's summary, as the factsheet lists it."""
    reports: set[str] = set()
    """Every report file a round's statement names."""
    for path in sorted(folder.glob(f"{ROUND_PREFIX}*{ROUND_SUFFIX}"), key=lambda p: p.name):
        number = round_of(path.relative_to(folder).as_posix())
        if number is not None:
            found = _round_checks(folder, number, ring, subjects, image_digest, evaluation_data, rounds, reports)
            report.checks += found
    report.checks += factsheet_checks(folder, statement, rounds)
    report.checks += _unsigned(folder, statement, reports)
    return report


def _is_manifest(subject: Mapping[str, Any]) -> bool:
    """The subject of a statement without result files: the manifest document."""
    return bool(subject.get("annotations", {}).get("kind") == "manifest")


def _completeness_check(predicate: Mapping[str, Any]) -> Check:
    internal = predicate["buildDefinition"].get("internalParameters", {})
    if internal.get("complete", False) is True:
        return Check("completeness", State.OK, "every learner of every attempt has its record")
    gaps = internal.get("missingRecords", [])
    named = "; ".join(f"attempt {g['attempt']} learner {g['learner']}: {g['reason']}" for g in gaps)
    detail = f"the platform holds no record of {named}" if named else "the statement does not say it is complete"
    return Check("completeness", State.INCOMPLETE, detail + ": what those learners stored is not signed")


def _unsigned(folder: Path, statement: Mapping[str, Any], reports: set[str]) -> list[Check]:
    """Every file of the folder that no statement names (nor is one of the platform's documents)."""
    named = {s["name"] for s in statement["subject"]} | set(PLATFORM_DOCUMENTS)
    run = statement["predicate"]["runDetails"]
    for byproduct in run.get("byproducts", []):
        named.add(str(byproduct["name"]))
    for dependency in statement["predicate"]["buildDefinition"]["resolvedDependencies"]:
        named.add(str(dependency["name"]))
    named |= reports
    checks = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        log = relative.partition(".part-")[0] if ".part-" in relative else None
        if relative in named or (log is not None and log in named) or round_of(relative) is not None:
            continue
        checks.append(Check(f"file {relative}", State.UNSIGNED, "no statement names it (not verified)"))
    return checks


def _round_checks(
    folder: Path,
    number: int,
    ring: Sequence[Key],
    subjects: Mapping[str, str],
    image_digest: ImageLookup | None,
    evaluation_data: DataLookup | None,
    rounds: list[dict[str, Any]],
    reports: set[str],
) -> list[Check]:
    """An evaluation round's statement: signed by the platform, about the provenance's model, each report as
    stored, each evaluator image as the engine has it, each evaluation data object as its store holds it."""
    name = round_file(number)
    item = f"evaluation round {number} signature"
    try:
        statement, key = open_signed((folder / name).read_bytes(), ring, name)
    except EnvelopeError as e:
        return [Check(item, State.CHANGED, str(e))]
    if statement.get("predicateType") != EVALUATION_PREDICATE:
        return [Check(item, State.CHANGED, f"not a {EVALUATION_PREDICATE} statement")]
    checks = [Check(item, State.OK, f"signed by {key.keyid}")]
    reports.update(r["name"] for e in statement["predicate"]["evaluations"] for r in e["reports"])
    rounds.append(round_summary(statement))
    model = {s["name"]: s["digest"]["sha256"] for s in statement["subject"] if not _is_manifest(s)}
    if model != dict(subjects):
        checks.append(Check(f"evaluation round {number} model", State.CHANGED, "not the provenance's results"))
    for evaluation in statement["predicate"]["evaluations"]:
        for stored in evaluation["reports"]:
            path = folder / stored["name"]
            checks.append(_file_check(f"evaluation report {stored['name']}", [path], stored["digest"]["sha256"]))
        image = evaluation.get("evaluatorImage")
        if image is not None:
            checks.append(_image_check(EVALUATOR_IMAGE, image, image_digest))
        for stored in evaluation.get("data", []):
            checks.append(_data_check(f"evaluation round {number} data {stored['uri']}", stored, evaluation_data))
    return checks


def _data_check(item: str, stored: Mapping[str, Any], evaluation_data: DataLookup | None) -> Check:
    if evaluation_data is None:
        return Check(item, State.NOT_CHECKED, "read from its store only when verifying by job id")
    answer = evaluation_data(str(stored["uri"]))
    if answer.problem:
        return Check(item, State.NOT_CHECKED, answer.problem)
    recorded = stored["digest"]["sha256"]
    if answer.sha256 != recorded:
        return Check(item, State.CHANGED, f"sha256 {answer.sha256} in its store now, the round used {recorded}")
    return Check(item, State.OK)


def _file_check(item: str, paths: list[Path], sha256: str, *, absent: State = State.NOT_CHECKED) -> Check:
    if not paths or not all(path.is_file() for path in paths):
        return Check(item, absent, "not in the folder")
    actual = _HASHER.get()(paths)
    if actual != sha256:
        return Check(item, State.CHANGED, f"sha256 {actual}, the provenance says {sha256}")
    return Check(item, State.OK)


def _byproduct_check(folder: Path, byproduct: Mapping[str, Any]) -> Check:
    name, sha256 = str(byproduct["name"]), byproduct["digest"]["sha256"]
    kind = "manifest" if name.startswith("provenance/") else "metric history" if name.endswith(".jsonl") else "file"
    if name.endswith("/learner.log"):
        kind = "log"
        parts = sorted(folder.glob(f"{name}.part-*"))
        return _file_check(f"{kind} {name}", parts, sha256)
    if "/evaluations/" in name:
        kind = "evaluation report"
    return _file_check(f"{kind} {name}" if kind != "manifest" else "manifest", [folder / name], sha256)


def _dependency_checks(
    folder: Path, dependency: Mapping[str, Any], data: Path | None, image_digest: ImageLookup | None
) -> list[Check]:
    name = str(dependency["name"])
    digest = dependency.get("digest", {})
    if name in (LEARNER_IMAGE, SIDECAR_IMAGE):
        return [_image_check(name, dependency, image_digest)]
    if name.startswith("data:"):
        relative = dependency.get("annotations", {}).get("path")
        if data is None or not isinstance(relative, str):
            return [Check(f"training data {dependency['uri']}", State.NOT_CHECKED, "no local copy given (--data)")]
        return [_file_check(f"training data {dependency['uri']}", [data / relative], digest["sha256"])]
    if name.startswith("model"):
        return [_file_check(f"model code {name}", [folder / name], digest["sha256"])]
    return []


def _image_check(name: str, dependency: Mapping[str, Any], image_digest: ImageLookup | None) -> Check:
    reference = str(dependency.get("uri", "")).removeprefix("docker-image://")
    item = f"{name.replace('-', ' ')} {reference}"
    if "sha256" not in dependency.get("digest", {}):
        return Check(item, State.NOT_CHECKED, "the provenance records no digest of it")
    recorded = "sha256:" + dependency["digest"]["sha256"]
    if image_digest is None:
        return Check(item, State.NOT_CHECKED, "no engine or registry to ask")
    answer = image_digest(reference)
    if answer.problem:
        return Check(item, State.NOT_CHECKED, f"{answer.source} cannot be asked: {answer.problem}")
    if not answer.digests:
        return Check(item, State.NOT_CHECKED, f"{answer.source} does not have it")
    if recorded not in answer.digests:
        held = ", ".join(sorted(answer.digests))
        return Check(item, State.CHANGED, f"{answer.source} has {held} under this reference, the job ran {recorded}")
    return Check(item, State.OK, f"as {answer.source} has it")


def _model_signature_check(folder: Path, ring: Sequence[Key], subjects: Mapping[str, str]) -> Check:
    path = folder / SIGNATURE_FILE
    item = f"model signature {SIGNATURE_FILE}"
    if not path.is_file():
        return Check(item, State.NOT_CHECKED, "not in the folder")
    try:
        bundle = json.loads(path.read_bytes())
    except ValueError as e:
        return Check(item, State.CHANGED, f"not JSON: {e}")
    if not isinstance(bundle, dict) or bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        return Check(item, State.CHANGED, f"not a {BUNDLE_MEDIA_TYPE} bundle")
    signed, problem = None, "no key to check it with"
    for key in ring:  # the bundle names no key id (model-signing's key mode): each of the platform's keys is tried
        try:
            envelope = {**bundle["dsseEnvelope"]}
            envelope["signatures"] = [{**s, "keyid": key.keyid} for s in envelope["signatures"]]
            signed = open_envelope(json.dumps(envelope).encode(), key, item)
            break
        except (EnvelopeError, KeyError, TypeError, ValueError) as e:
            problem = str(e)
    if signed is None:
        return Check(item, State.CHANGED, problem)
    listed = {r["name"]: r["digest"] for r in signed.get("predicate", {}).get("resources", [])}
    if signed.get("predicateType") != MODEL_PREDICATE or listed != dict(subjects):
        return Check(item, State.CHANGED, "it does not list the provenance's results")
    return Check(item, State.OK, f"signed by {key.keyid}")
