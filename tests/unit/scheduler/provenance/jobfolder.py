"""A finished job as the platform leaves it in the object store (in memory), its provenance written by the real
writer, and the folder `job download --what all` makes of it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from controller_sidecar.provenancerecord import RECORD_KEY, Digested, InstalledPackage, SidecarRecord
from controller_sidecar.recordchannel import RecordsRead
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from learnerkit.common.signing import create_signer, load_signer
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
from tests.unit.scheduler.fakefacade import MANIFEST

LEARNER_IMAGE = "learnerkit/pytorch:2.3-cpu-py3.11"
LEARNER_ID = "sha256:" + "1" * 64
SIDECAR_ID = "sha256:" + "2" * 64
JOB = "job-7"
PREFIX = f"{JOB}/"
DATA = {"train/a.bin": b"first data object", "train/b.bin": b"second data object"}
MODEL_ZIP = b"PK\x05\x06" + bytes(18)
RESULT = b"trained weights"
RESULT_FILES: dict[str, bytes] | None = None
"""The learner's results by path (`results/model/model.pt`), instead of one `results/model.bin` of RESULT."""
METRICS = b'{"step": 1, "values": {"loss": 0.9}}\n{"step": 2, "values": {"loss": 0.4}}\n'
LOG = [b"epoch 1\n", b"epoch 2\n"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class MemoryStore:
    objects: dict[str, bytes] = field(default_factory=dict)
    records: dict[tuple[int, int], SidecarRecord] = field(default_factory=dict)
    """The sidecars' records as they put them in etcd (the bucket's copies are the tenant's)."""
    unfinished: dict[tuple[int, int], str] = field(default_factory=dict)
    """Records opened in etcd and never finished, and why."""

    def list(self, location: S3Location) -> list[RemoteObject]:
        return [RemoteObject(k, len(v), "e") for k, v in sorted(self.objects.items()) if k.startswith(location.prefix)]

    def get_bytes(self, bucket: str, key: str) -> bytes:
        return self.objects[key]

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self.objects[key] = data


def describe(image: str) -> ImageFact:
    if image == LEARNER_ID:
        return ImageFact(LEARNER_IMAGE, LEARNER_ID, {"sbom": "a" * 64, "scan": "b" * 64}, "passed")
    return ImageFact("learnerkit/sidecar:0.1.0", SIDECAR_ID)


def stored_attempt(store: MemoryStore, attempt: int, *, restored: int | None, results: bool = True) -> None:
    learner = f"{PREFIX}attempt-{attempt}/learner-1/"
    files = RESULT_FILES or {"results/model.bin": RESULT + str(attempt).encode()}
    if results:
        for name, data in files.items():
            store.objects[learner + name] = data
    store.objects[learner + "logs/metrics.jsonl"] = METRICS
    for n, part in enumerate(LOG):
        store.objects[learner + f"logs/learner.log.part-{n:06d}"] = part
    record = SidecarRecord(
        1,
        tuple(Digested(f"s3://data/{key}", sha(value), len(value)) for key, value in sorted(DATA.items())),
        Digested(f"s3://results/{PREFIX}model/model.zip", sha(MODEL_ZIP), len(MODEL_ZIP)),
        (InstalledPackage("lkgreet", "1.0", "c" * 64),),
        tuple(Digested(name, sha(data), len(data)) for name, data in files.items()) if results else (),
        Digested("logs/metrics.jsonl", sha(METRICS), len(METRICS)),
        restored,
        None if restored is None else marker_digest(attempt - 1),
    )
    store.objects[learner + RECORD_KEY] = record.to_json()
    store.records[(attempt, 1)] = record


def forge(store: MemoryStore, attempt: int) -> None:
    """What a tenant can do with its own keys: a result replaced, and the bucket's copy of the record to match."""
    learner = f"{PREFIX}attempt-{attempt}/learner-1/"
    forged = b"a backdoored model"
    store.objects[learner + "results/model.bin"] = forged
    record = SidecarRecord.from_json(store.objects[learner + RECORD_KEY], "forge")
    record = replace(record, results=(Digested("results/model.bin", sha(forged), len(forged)),))
    store.objects[learner + RECORD_KEY] = record.to_json()


def marker_digest(attempt: int) -> str:
    """The digest the sidecar of the next attempt took of this attempt's last checkpoint marker."""
    return sha(f"marker of attempt {attempt}".encode())


def attempt_of(number: int, ended_by: AttemptEnd, reason: str = "") -> Attempt:
    """The attempts history's record of one attempt, closed."""
    stamp = f"2026-01-01T0{number}"
    return Attempt(
        number,
        (f"node-{number}",),
        f"{stamp}:01:00Z",
        resumed_from=number - 1 if number > 1 else None,
    ).ended(ended_by, reason, f"{stamp}:30:00Z")


def finished_job(
    tmp: Path,
    attempts: int = 1,
    earlier: AttemptEnd = AttemptEnd.HALTED,
    reason: str = "halted",
    images: Callable[[str], ImageFact] = describe,
    ran_digest: str = "",
    *,
    results: bool = True,
    lose_record: int | None = None,
    tamper: int | None = None,
    signing_key: Path | None = None,
) -> tuple[MemoryStore, Path]:
    """The job's objects with its provenance written at each end; the key's path. Every attempt but the last ends
    as ``earlier`` says (HALTED: the job ended and was resumed; PREEMPTED or RESTARTED: the scheduler requeued it),
    and the last completes. ``images`` describes the learner image (``LEARNER_ID``) and the sidecar's; ``ran_digest``
    is the learner image's digest as the backend reported it ran; ``results``: whether the learner wrote any;
    ``lose_record``: the attempt whose sidecar record never reached etcd (its bucket copy is there); ``tamper``:
    the attempt whose result and bucket record the tenant rewrites while the job is halted after it;
    ``signing_key``: an existing key to sign with (else a new one)."""
    store = MemoryStore({f"{PREFIX}model/model.zip": MODEL_ZIP})
    key = signing_key or tmp / "platform.pem"
    signer = load_signer(key) if signing_key else create_signer(key)
    writer = ProvenanceWriter(signer, images, "learnerkit/sidecar:0.1.0")
    manifest = parse_manifest(MANIFEST.format(gpus=1))
    history: list[Attempt] = []
    for number in range(1, attempts + 1):
        stored_attempt(store, number, restored=None if number == 1 else 100 * (number - 1), results=results)
        if number == lose_record:
            del store.records[(number, 1)]
            store.unfinished[(number, 1)] = "its sidecar started and put no record"
        if number == tamper:
            forge(store, number)
        last = number == attempts
        history.append(attempt_of(number, AttemptEnd.COMPLETED if last else earlier, "" if last else reason))
        if last or earlier is AttemptEnd.HALTED:
            status = JobStatus.COMPLETED if last else JobStatus.HALTED
            state = JobState(JOB, "team-a", "mnist", 0.0, status=status, attempt=number)
            records = RecordsRead(dict(store.records), dict(store.unfinished))
            job = FinishedJob(
                state, manifest, LEARNER_ID, tuple(history), "lk-test", ran_digest=ran_digest, records=records
            )
            writer.write(store, job)
    return store, key


def download(store: MemoryStore, folder: Path) -> Path:
    """What `job download --what all` writes: every object below the job's prefix that is one of its outputs (not
    the sidecars' records)."""
    for key, data in store.objects.items():
        relative = key.removeprefix(PREFIX)
        if kind_of(relative) is None:
            continue
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)
    return folder


def data_copy(folder: Path) -> Path:
    for key, value in DATA.items():
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        (folder / key).write_bytes(value)
    return folder


EVALUATOR_IMAGE = "learnerkit/eval-robustness:0.1.0"
EVALUATOR_ID = "sha256:" + "3" * 64
EVAL_DATA = b"x,y\n1,0\n"


def report_bytes(verdict: str) -> bytes:
    return f'{{"name": "robust", "verdict": "{verdict}"}}\n'.encode()


def describe_evaluator(image: str) -> ImageFact:
    return ImageFact(EVALUATOR_IMAGE, EVALUATOR_ID) if image == EVALUATOR_ID else describe(image)


def evaluated_round(store: MemoryStore, key: Path, round_: int, verdict: str = "passed") -> None:
    """An evaluation round as the platform leaves it: the evaluation sidecar's outputs and record, then the round's
    statement written by the real writer."""
    folder = f"evaluations/round-{round_}/robust/"
    report = report_bytes(verdict)
    store.objects[PREFIX + folder + "results/evaluations/robust.json"] = report
    record = SidecarRecord(
        1,
        (Digested("s3://data/eval/digits.csv", sha(EVAL_DATA), len(EVAL_DATA)),),
        results=(Digested("results/evaluations/robust.json", sha(report), len(report)),),
    )
    store.objects[PREFIX + folder + RECORD_KEY] = record.to_json()
    failures = () if verdict == "passed" else ({"metric": "accuracy", "value": 0.2, "threshold": 0.5},)
    evaluation = SettledEvaluation(
        "robust", "robustness", verdict, "", failures, {"name": "robust", "kind": "robustness"}, EVALUATOR_ID, folder
    )
    settled = SettledRound(JOB, "results", PREFIX, round_, 1, (evaluation,), "lk-test")
    EvaluationProvenanceWriter(load_signer(key), describe_evaluator).write(store, settled)
