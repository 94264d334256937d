"""Which of the objects under a job's prefix are its outputs, and that no path reaches past them (a listing
fake stands for the store; the real one is in tests/integration/scheduler/test_job_outputs.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from learnerkit.scheduler.outputs.files import kind_of, list_outputs, metrics_history, open_output

JOB = S3Location("results", "team/job-1/")


class Store:
    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.reads: list[str] = []

    def list(self, location: S3Location) -> list[RemoteObject]:
        return [
            RemoteObject(key, len(data), "etag")
            for key, data in sorted(self.objects.items())
            if location.bucket == "results" and key.startswith(location.prefix)
        ]

    def read_range(self, bucket: str, key: str, first: int, last: int) -> Iterator[bytes]:
        self.reads.append(key)
        data = self.objects[key][first : last + 1]
        return iter([data[i : i + 3] for i in range(0, len(data), 3)])


STORED = {
    "team/job-1/attempt-1/learner-1/results/out.txt": b"result",
    "team/job-1/attempt-1/learner-1/logs/metrics.jsonl": b'{"step": 1}\n',
    "team/job-1/attempt-2/learner-1/logs/metrics.jsonl": b'{"step": 2}\n',
    "team/job-1/attempt-1/learner-2/checkpoints/ckpt-5/w.pt": b"w",
    "team/job-1/model.zip": b"PK",
    "team/job-1/attempt-1/learner-1/other/x": b"not an output",
    "team/job-1/attempt-1/learner-1/provenance/sidecar.json": b"{}",
    "team/job-1/provenance/provenance.intoto.json": b"{}",
    "team/job-10/attempt-1/learner-1/results/theirs.txt": b"another job",
}


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("attempt-1/learner-1/results/a/b.txt", "results"),
        ("attempt-12/learner-3/logs/learner.log.part-000001", "logs"),
        ("attempt-1/learner-1/checkpoints/ckpt-5/.complete", "checkpoints"),
        ("model.zip", "model"),
        ("model/train.py", "model"),
        ("attempt-1/learner-1/results/", None),
        ("attempt-1/learner-1/control/x", None),
        ("attempt-x/learner-1/results/a", None),
        ("credentials", None),
        ("evaluations/round-2/robust/results/evaluations/robust.json", "evaluations"),
        ("evaluations/round-1/fair/logs/learner.log.part-000000", "evaluations"),
        ("evaluations/round-1/fair/provenance/sidecar.json", None),
        ("evaluations/round-x/fair/results/a.json", None),
    ],
)
def test_each_path_has_one_kind_or_none(path: str, kind: str | None) -> None:
    assert kind_of(path) == kind


def test_the_listing_is_the_jobs_outputs_of_the_asked_kind_only() -> None:
    store = Store(STORED)
    assert [f.path for f in list_outputs(store, JOB, "results")] == ["attempt-1/learner-1/results/out.txt"]
    assert [(f.path, f.kind) for f in list_outputs(store, JOB, "model")] == [("model.zip", "model")]
    assert [(f.path, f.kind) for f in list_outputs(store, JOB, "provenance")] == [
        ("provenance/provenance.intoto.json", "provenance")
    ], "the job's signed provenance; a sidecar's record is no output"
    every = {f.path for f in list_outputs(store, JOB)}
    assert "attempt-1/learner-1/other/x" not in every
    assert not any("theirs" in path for path in every), "job-10 shares job-1's prefix text, not its folder"
    with pytest.raises(
        ValueError, match="what: one of results, logs, checkpoints, model, provenance, evaluations, all, got"
    ):
        list_outputs(store, JOB, "secrets")


@pytest.mark.parametrize(
    "path",
    [
        "attempt-1/learner-1/results/../../../../job-10/attempt-1/learner-1/results/theirs.txt",
        "/team/job-1/model.zip",
        "attempt-1/learner-1/other/x",
        "attempt-1/learner-1/results/missing",
        "attempt-1/learner-1/results",
    ],
)
def test_a_path_that_names_no_output_of_the_job_opens_nothing(path: str) -> None:
    store = Store(STORED)
    assert open_output(store, JOB, path) is None
    assert store.reads == []


def test_an_output_is_streamed_whole() -> None:
    stream = open_output(Store(STORED), JOB, "attempt-1/learner-1/results/out.txt")
    assert stream is not None and (stream.size, stream.read()) == (6, b"result")


def test_the_history_is_every_attempts_metrics_oldest_first() -> None:
    stream = metrics_history(Store(STORED), JOB, attempts=2, learner_id=1)
    assert stream.read() == b'{"step": 1}\n{"step": 2}\n'
    assert metrics_history(Store(STORED), JOB, attempts=2, learner_id=3).read() == b""
