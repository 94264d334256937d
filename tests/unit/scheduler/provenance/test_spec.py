"""Every job statement the writer makes is valid by in-toto attestation's definitions and prose rules
(`tests/unit/scheduler/provenance/spec.py`): one attempt, a job resumed twice, one preempted, one with no result
files, one whose record of a learner the platform does not hold."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from learnerkit.scheduler.jobs.attempts import AttemptEnd
from learnerkit.scheduler.provenance.statement import MANIFEST_FILE
from tests.unit.scheduler.provenance.jobfolder import PREFIX, MemoryStore, finished_job, sha
from tests.unit.scheduler.provenance.spec import spec_violations


def statement_of(store: MemoryStore) -> dict[str, Any]:
    envelope = json.loads(store.objects[PREFIX + "provenance/provenance.intoto.json"])
    payload: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return payload


JOBS: dict[str, Callable[[Path], MemoryStore]] = {
    "one attempt": lambda tmp: finished_job(tmp)[0],
    "resumed twice": lambda tmp: finished_job(tmp, attempts=3)[0],
    "preempted": lambda tmp: finished_job(tmp, attempts=2, earlier=AttemptEnd.PREEMPTED, reason="by urgent")[0],
    "no result files": lambda tmp: finished_job(tmp, results=False)[0],
    "a record missing": lambda tmp: finished_job(tmp, attempts=2, lose_record=1)[0],
}


@pytest.mark.parametrize("case", sorted(JOBS))
def test_every_job_statement_is_valid_by_the_specification(tmp_path: Path, case: str) -> None:
    assert spec_violations(statement_of(JOBS[case](tmp_path))) == []


def test_the_attempts_byproduct_carries_its_content_and_digest(tmp_path: Path) -> None:
    statement = statement_of(finished_job(tmp_path, attempts=2)[0])
    [attempts] = [b for b in statement["predicate"]["runDetails"]["byproducts"] if b["name"] == "attempts"]
    content = base64.b64decode(attempts["content"])
    assert json.loads(content) == attempts["annotations"]["attempts"]
    assert attempts["digest"] == {"sha256": sha(content)}


def test_a_job_without_result_files_has_its_manifest_document_as_subject(tmp_path: Path) -> None:
    store = finished_job(tmp_path, results=False)[0]
    [subject] = statement_of(store)["subject"]
    assert subject["name"] == MANIFEST_FILE
    assert subject["digest"] == {"sha256": sha(store.objects[PREFIX + MANIFEST_FILE])}
    assert subject["annotations"] == {"kind": "manifest"}


def test_the_checker_catches_what_the_specification_forbids() -> None:
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {"buildType": "b", "externalParameters": {}, "resolvedDependencies": [{"name": "x"}]},
            "runDetails": {"builder": {"id": "i"}, "byproducts": [{"name": "attempts", "annotations": {"a": 1}}]},
        },
    }
    found = spec_violations(statement)
    assert any(v.startswith("subject: empty") for v in found)
    assert any(v.startswith("resolvedDependencies[0]: a ResourceDescriptor needs") for v in found)
    assert any(v.startswith("byproducts[0] attempts: a ResourceDescriptor needs") for v in found)
