"""A finished, evaluated job's download folder for `bench/catalog.py`: its weights of a given size, its documents
written and signed by the platform's real provenance and evaluation writers (the objects held in memory)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from controller_sidecar.provenancerecord import RECORD_KEY, Digested, SidecarRecord
from controller_sidecar.recordchannel import RecordsRead
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from learnerkit.common.signing import create_signer
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.outputs.files import kind_of
from learnerkit.scheduler.provenance.evaluationwriter import (
    EvaluationProvenanceWriter,
    SettledEvaluation,
    SettledRound,
)
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.writer import FinishedJob, ProvenanceWriter

JOB = "job-bench"
PREFIX = f"{JOB}/"
LEARNER_ID = "sha256:" + "1" * 64
EVALUATOR_ID = "sha256:" + "3" * 64
METRICS = b'{"step": 1, "values": {"loss": 0.9}}\n{"step": 2, "values": {"loss": 0.4}}\n'
MANIFEST = """\
name: digits
learners: 1
data_stores:
  - id: store
    type: s3_datastore
    training_data: {container: data}
    training_results: {container: results}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: key, password: secret}
framework: {name: pytorch, version: "2.13", command: python train.py}
"""


@dataclass
class MemoryStore:
    objects: dict[str, bytes] = field(default_factory=dict)

    def list(self, location: S3Location) -> list[RemoteObject]:
        return [RemoteObject(k, len(v), "e") for k, v in sorted(self.objects.items()) if k.startswith(location.prefix)]

    def get_bytes(self, bucket: str, key: str) -> bytes:
        return self.objects[key]

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self.objects[key] = data


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _describe(image: str) -> ImageFact:
    if image == LEARNER_ID:
        return ImageFact(
            "learnerkit/pytorch:2.13-cpu-py3.11", LEARNER_ID, {"sbom": "a" * 64, "scan": "b" * 64}, "passed"
        )
    if image == EVALUATOR_ID:
        return ImageFact("learnerkit/eval-robustness:0.1.0", EVALUATOR_ID)
    return ImageFact("learnerkit/sidecar:0.1.0", "sha256:" + "2" * 64)


def job_folder(root: Path, weights: bytes) -> tuple[Path, Path]:
    """(the download folder, the platform key) of a job whose one result file is ``weights``, with one evaluation
    round that passed."""
    root.mkdir(parents=True, exist_ok=True)
    key = root / "platform.pem"
    signer = create_signer(key)
    learner = f"{PREFIX}attempt-1/learner-1/"
    store = MemoryStore({learner + "results/model.bin": weights, learner + "logs/metrics.jsonl": METRICS})
    data = b"training data"
    record = SidecarRecord(
        1,
        (Digested("s3://data/train.csv", _sha(data), len(data)),),
        results=(Digested("results/model.bin", _sha(weights), len(weights)),),
        metrics=Digested("logs/metrics.jsonl", _sha(METRICS), len(METRICS)),
    )
    store.objects[learner + RECORD_KEY] = record.to_json()
    attempt = Attempt(1, ("node-1",), "2026-01-01T01:00:00Z").ended(AttemptEnd.COMPLETED, "", "2026-01-01T02:00:00Z")
    state = JobState(JOB, "bench", "digits", 0.0, status=JobStatus.COMPLETED, attempt=1)
    finished = FinishedJob(
        state, parse_manifest(MANIFEST), LEARNER_ID, (attempt,), "bench", records=RecordsRead({(1, 1): record}, {})
    )
    ProvenanceWriter(signer, _describe, "learnerkit/sidecar:0.1.0").write(store, finished)
    folder = "evaluations/round-1/robust/"
    report = b'{"name": "robust", "verdict": "passed"}\n'
    store.objects[PREFIX + folder + "results/evaluations/robust.json"] = report
    evaluation_record = SidecarRecord(
        1,
        (Digested("s3://data/eval.csv", _sha(data), len(data)),),
        results=(Digested("results/evaluations/robust.json", _sha(report), len(report)),),
    )
    store.objects[PREFIX + folder + RECORD_KEY] = evaluation_record.to_json()
    spec = {"name": "robust", "kind": "robustness"}
    evaluation = SettledEvaluation("robust", "robustness", "passed", "", (), spec, EVALUATOR_ID, folder)
    settled = SettledRound(JOB, "results", PREFIX, 1, 1, (evaluation,), "bench")
    EvaluationProvenanceWriter(signer, _describe).write(store, settled)
    download = root / "download"
    for name, content in store.objects.items():
        relative = name.removeprefix(PREFIX)
        if kind_of(relative) is not None:
            (download / relative).parent.mkdir(parents=True, exist_ok=True)
            (download / relative).write_bytes(content)
    return download, key
