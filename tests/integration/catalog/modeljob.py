"""A finished, evaluated job's download folder, written by the platform's real provenance and evaluation writers
and signed with a platform key (as `tests/unit/scheduler/provenance/jobfolder.py` leaves it)."""

from __future__ import annotations

import uuid
from pathlib import Path

from controller_sidecar.provenancerecord import RECORD_KEY, Digested, SidecarRecord
from learnerkit.common.signing import load_signer
from learnerkit.scheduler.provenance.evaluationwriter import EvaluationProvenanceWriter, SettledEvaluation, SettledRound
from tests.unit.scheduler.provenance import jobfolder
from tests.unit.scheduler.provenance.jobfolder import (
    EVAL_DATA,
    EVALUATOR_ID,
    JOB,
    PREFIX,
    MemoryStore,
    describe_evaluator,
    download,
    finished_job,
    sha,
)


def evaluated(store: object, key: Path, name: str, kind: str, verdict: str, round_: int = 1) -> None:
    folder = f"evaluations/round-{round_}/{name}/"
    report = f'{{"name": "{name}", "verdict": "{verdict}"}}\n'.encode()
    store.objects[PREFIX + folder + f"results/evaluations/{name}.json"] = report  # type: ignore[attr-defined]
    record = SidecarRecord(
        1,
        (Digested("s3://data/eval/digits.csv", sha(EVAL_DATA), len(EVAL_DATA)),),
        results=(Digested(f"results/evaluations/{name}.json", sha(report), len(report)),),
    )
    store.objects[PREFIX + folder + RECORD_KEY] = record.to_json()  # type: ignore[attr-defined]
    failed = verdict != "passed"
    failures = ({"metric": "disparate_impact", "value": 0.6, "threshold": 0.8},) if failed else ()
    message = "missed: disparate_impact = 0.6, threshold >= 0.8" if failed else ""
    evaluation = SettledEvaluation(
        name, kind, verdict, message, failures, {"name": name, "kind": kind}, EVALUATOR_ID, folder
    )
    settled = SettledRound(JOB, "results", PREFIX, round_, 1, (evaluation,), "lk-test")
    EvaluationProvenanceWriter(load_signer(key), describe_evaluator).write(store, settled)  # type: ignore[arg-type]


def job_folder(tmp: Path, *, fairness: str = "passed", key: Path | None = None) -> tuple[Path, Path]:
    """(the download folder, the platform key) of `evaluated_job`."""
    store, key = evaluated_job(tmp, fairness=fairness, key=key)
    return download(store, tmp / "download"), key


def evaluated_job(tmp: Path, *, fairness: str = "passed", key: Path | None = None) -> tuple[MemoryStore, Path]:
    """(the job's objects, below ``JOB/``, the platform key): one attempt, a robustness round that passed and a
    fairness round with ``fairness``'s verdict. Its weights are its own bytes: the registry stores a blob once for
    every repository, so a test that corrupts one in the registry's storage touches no other test's version."""
    tmp.mkdir(parents=True, exist_ok=True)
    kept = jobfolder.RESULT
    jobfolder.RESULT = b"trained weights " + uuid.uuid4().hex.encode()
    try:
        store, key = finished_job(tmp, signing_key=key)
    finally:
        jobfolder.RESULT = kept
    evaluated(store, key, "robust", "robustness", "passed", 1)
    evaluated(store, key, "fair", "fairness", fairness, 2)
    return store, key
