"""`job verify JOB` hashes a job's evaluation data again from its store, through the scheduler: the scheduler serves
an object only where a round statement of the job that its own key signed lists it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller_sidecar.endpoints import Endpoints
from learnerkit.common.signing import create_signer, load_signer
from learnerkit.scheduler.core.evaluationdata import open_evaluation_data
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import UnknownFileError
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.outputs.reader import OutputsReader
from learnerkit.scheduler.provenance.writer import ProvenanceWriter
from tests.unit.scheduler.fakefacade import MANIFEST
from tests.unit.scheduler.provenance.jobfolder import (
    EVAL_DATA,
    JOB,
    MemoryStore,
    describe,
    evaluated_round,
    finished_job,
)

URI = "s3://data/eval/digits.csv"
ENDPOINTS = Endpoints("127.0.0.1:2379", s3_endpoint_url="http://127.0.0.1:8333")


class ReadableStore(MemoryStore):
    """The job's results store (the bucket is not told apart: the job's objects and the data share one map)."""

    def read_range(self, bucket: str, key: str, first: int, last: int) -> Iterator[bytes]:
        yield self.objects[key][first : last + 1]


class Clients:
    def __init__(self, store: ReadableStore) -> None:
        self.store = store

    def of(self, endpoints: Endpoints) -> ReadableStore:
        return self.store


@pytest.fixture
def job(tmp_path: Path) -> tuple[OutputsReader, Tracked, ProvenanceWriter, ReadableStore]:
    memory, key = finished_job(tmp_path)
    evaluated_round(memory, key, 1)
    store = ReadableStore(dict(memory.objects))
    store.objects["eval/digits.csv"] = EVAL_DATA
    manifest = parse_manifest(MANIFEST.format(gpus=1))
    tracked = Tracked(JobState(JOB, "team-a", "mnist", 0.0, status=JobStatus.COMPLETED), manifest, "", "m.yml")
    writer = ProvenanceWriter(load_signer(key), describe, "learnerkit/sidecar:0.1.0")
    return OutputsReader(Clients(store)), tracked, writer, store  # type: ignore[arg-type]


def opened(job: tuple[OutputsReader, Tracked, ProvenanceWriter, ReadableStore], uri: str) -> bytes:
    reader, tracked, writer, _ = job
    return asyncio.run(open_evaluation_data(reader, ENDPOINTS, tracked, writer, uri)).read()


def test_an_object_a_signed_round_lists_is_served(
    job: tuple[OutputsReader, Tracked, ProvenanceWriter, ReadableStore],
) -> None:
    assert opened(job, URI) == EVAL_DATA


def test_any_other_object_is_refused_naming_it(
    job: tuple[OutputsReader, Tracked, ProvenanceWriter, ReadableStore],
) -> None:
    with pytest.raises(UnknownFileError, match=r"no evaluation round statement of it lists 's3://data/other.csv'"):
        opened(job, "s3://data/other.csv")


def test_a_round_another_key_signed_lists_nothing(
    job: tuple[OutputsReader, Tracked, ProvenanceWriter, ReadableStore], tmp_path: Path
) -> None:
    reader, tracked, _, store = job
    other = ProvenanceWriter(create_signer(tmp_path / "other.pem"), describe, "learnerkit/sidecar:0.1.0")
    with pytest.raises(UnknownFileError, match=r"lists 's3://data/eval/digits.csv'"):
        opened((reader, tracked, other, store), URI)


def test_a_listed_object_the_store_lost_is_named(
    job: tuple[OutputsReader, Tracked, ProvenanceWriter, ReadableStore],
) -> None:
    del job[3].objects["eval/digits.csv"]
    with pytest.raises(UnknownFileError, match=r"the store no longer has s3://data/eval/digits.csv"):
        opened(job, URI)
