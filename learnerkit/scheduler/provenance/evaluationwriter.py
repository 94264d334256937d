"""Signs an evaluation round of a job's model once every evaluation of it has settled, stores the statement beside
the job's provenance (``provenance/evaluation-round-<r>.intoto.json``) and lists the round in the factsheet.

The digests are the sidecars': the model's from the job's attempts' records (those the model signature lists), the
evaluation data's and the reports' from each evaluation's record
(``evaluations/round-<r>/<name>/provenance/sidecar.json``), taken as the bytes streamed.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from securesystemslib.signer import CryptoSigner

from controller_sidecar.provenancerecord import RECORD_KEY, Digested, RecordError, SidecarRecord
from controller_sidecar.settings import S3Location
from learnerkit.common.signing import canonical, sign_statement
from learnerkit.scheduler.provenance.evaluation import (
    ROUND_PREFIX,
    EvaluationFact,
    RoundFacts,
    evaluation_statement,
    round_file,
    round_of,
    round_summary,
)
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.factsheet import factsheet_markdown
from learnerkit.scheduler.provenance.records import attempt_records, result_digests
from learnerkit.scheduler.provenance.writer import FACTSHEET_JSON, FACTSHEET_MD, ProvenanceStore

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class SettledEvaluation:
    """One evaluation of a round as the scheduler recorded its end."""

    name: str
    kind: str
    verdict: str
    message: str
    failures: tuple[Mapping[str, Any], ...]
    spec: Mapping[str, Any]
    image: str
    """The evaluator image as deployed; empty where this scheduler process did not deploy it."""
    folder: str
    """Its outputs below the job's prefix: ``evaluations/round-<r>/<name>/``."""


@dataclass(frozen=True)
class SettledRound:
    job_id: str
    bucket: str
    prefix: str
    """The job's prefix in its results store."""
    round: int
    attempt: int
    evaluations: tuple[SettledEvaluation, ...]
    instance: str


@dataclass(frozen=True)
class EvaluationProvenanceWriter:
    signer: CryptoSigner
    describe_image: Callable[[str], ImageFact]

    def write(self, store: ProvenanceStore, settled: SettledRound) -> str:
        """Store the round's signed statement and refresh the factsheet; the key of the statement. A statement
        already stored is kept (a scheduler stopped after storing it, before recording so, asks again): each
        round is signed once."""
        key = settled.prefix + round_file(settled.round)
        if any(obj.key == key for obj in store.list(S3Location(settled.bucket, key))):
            LOGGER.info("job %s: provenance of evaluation round %d already stored", settled.job_id, settled.round)
        else:
            statement = evaluation_statement(self.facts(store, settled))
            store.put_bytes(settled.bucket, key, canonical(sign_statement(statement, self.signer)))
            LOGGER.info("job %s: provenance of evaluation round %d stored", settled.job_id, settled.round)
        refresh_factsheet(store, settled.bucket, settled.prefix)
        return key

    def facts(self, store: ProvenanceStore, settled: SettledRound) -> RoundFacts:
        bucket, prefix = settled.bucket, settled.prefix
        keys = [obj.key for obj in store.list(S3Location(bucket, f"{prefix}attempt-"))]
        model = result_digests(attempt_records(store, bucket, prefix, keys, settled.job_id))
        evaluations = []
        for evaluation in settled.evaluations:
            record = _evaluation_record(store, bucket, prefix + evaluation.folder, settled.job_id)
            reports = tuple(
                Digested(evaluation.folder + r.name, r.sha256, r.size) for r in (record.results if record else ())
            )
            evaluations.append(
                EvaluationFact(
                    name=evaluation.name,
                    kind=evaluation.kind,
                    verdict=evaluation.verdict,
                    message=evaluation.message,
                    failures=evaluation.failures,
                    spec=evaluation.spec,
                    image=self.describe_image(evaluation.image) if evaluation.image else None,
                    data=record.data if record else (),
                    reports=reports,
                )
            )
        return RoundFacts(settled.job_id, settled.round, settled.attempt, model, tuple(evaluations), settled.instance)


def _evaluation_record(store: ProvenanceStore, bucket: str, folder: str, job_id: str) -> SidecarRecord | None:
    key = folder + RECORD_KEY
    if not any(obj.key == key for obj in store.list(S3Location(bucket, key))):
        return None  # an evaluation that crashed before its sidecar stored anything
    try:
        return SidecarRecord.from_json(store.get_bytes(bucket, key), key)
    except RecordError as e:
        LOGGER.warning("job %s: %s", job_id, e)
        return None


def stored_rounds(store: ProvenanceStore, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """The summary of every round statement stored for the job, in round order (the platform's own documents)."""
    found: dict[int, dict[str, Any]] = {}
    for obj in store.list(S3Location(bucket, prefix + ROUND_PREFIX)):
        number = round_of(obj.key[len(prefix) :])
        if number is not None:
            envelope = json.loads(store.get_bytes(bucket, obj.key))
            found[number] = round_summary(json.loads(base64.b64decode(envelope["payload"])))
    return [found[number] for number in sorted(found)]


def refresh_factsheet(store: ProvenanceStore, bucket: str, prefix: str) -> None:
    """List every stored round in the factsheet, where the job has one."""
    key = prefix + FACTSHEET_JSON
    if not any(obj.key == key for obj in store.list(S3Location(bucket, key))):
        return
    sheet = json.loads(store.get_bytes(bucket, key))
    sheet["evaluations"] = stored_rounds(store, bucket, prefix)
    store.put_bytes(bucket, key, json.dumps(sheet, indent=1, sort_keys=True).encode())
    store.put_bytes(bucket, prefix + FACTSHEET_MD, factsheet_markdown(sheet).encode())
