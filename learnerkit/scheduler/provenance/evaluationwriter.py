"""Signs an evaluation round of a job's model once every evaluation of it has settled, stores the statement beside
the job's provenance (``provenance/evaluation-round-<r>.intoto.json``) and lists the round in the factsheet.

The model is the subjects of the job's own statement, as the platform signed it (its signature checked with the
platform's key: the bucket is the tenant's). The evaluation data's and the reports' digests are the sidecars', from
each evaluation's record (``evaluations/round-<r>/<name>/provenance/sidecar.json``), taken as the bytes streamed.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from securesystemslib.signer import CryptoSigner

from controller_sidecar.errors import SidecarError
from controller_sidecar.provenancerecord import RECORD_KEY, Digested, RecordError, SidecarRecord
from controller_sidecar.settings import S3Location
from learnerkit.common.errors import LearnerkitError
from learnerkit.common.signing import EnvelopeError, canonical, open_envelope, sign_statement
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
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON, FACTSHEET_MD, factsheet_markdown
from learnerkit.scheduler.provenance.verify import PROVENANCE_FILE
from learnerkit.scheduler.provenance.writer import ProvenanceStore

LOGGER = logging.getLogger(__name__)


class ProvenanceUnavailableError(LearnerkitError):
    """The job's own statement cannot be read back: what the round names as its model is unknown."""


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
        model = self._signed_model(store, settled)
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

    def _signed_model(self, store: ProvenanceStore, settled: SettledRound) -> tuple[Digested, ...]:
        """The subjects of the job's statement as the platform signed it; a statement missing or not the
        platform's is an error (the round is signed at a later try, never about a model the platform did not see)."""
        key = settled.prefix + PROVENANCE_FILE
        try:
            statement = open_envelope(store.get_bytes(settled.bucket, key), self.signer.public_key, key)
        except (EnvelopeError, SidecarError) as e:
            raise ProvenanceUnavailableError(f"job {settled.job_id}: the round's model is unknown: {e}") from e
        return tuple(Digested(s["name"], s["digest"]["sha256"], 0) for s in statement["subject"])


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
