"""The signed sweep trial of a version: read back as signed; another job's, another key's, or an edited one named."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common.signing import create_signer
from learnerkit.scheduler.catalog.trialstatement import TRIAL_FILE, TrialStatementError, sign_trial, signed_trial

TRIAL = {"sweep": "sweep-1", "trial": 3, "job": "job-7", "rung": 2}


def provenance(job: str = "job-7", tenant: str = "team-a", result: str = "ab" * 32) -> dict[str, Any]:
    return {
        "subject": [{"name": "attempt-1/learner-1/results/model.pt", "digest": {"sha256": result}}],
        "predicate": {
            "buildDefinition": {"externalParameters": {"tenant": tenant}, "internalParameters": {"jobId": job}}
        },
    }


def folder_with(tmp_path: Path, envelope: bytes) -> Path:
    (tmp_path / TRIAL_FILE).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / TRIAL_FILE).write_bytes(envelope)
    return tmp_path


def test_the_trial_reads_back_as_signed_and_none_without_a_statement(tmp_path: Path) -> None:
    signer = create_signer(tmp_path / "platform.key")
    assert signed_trial(tmp_path, provenance(), [signer.public_key]) is None
    folder = folder_with(tmp_path, sign_trial(TRIAL, provenance(), signer))
    assert signed_trial(folder, provenance(), [signer.public_key]) == TRIAL


@pytest.mark.parametrize(
    ("other", "named"),
    [
        (provenance(job="job-8"), "not of this version's job job-8"),
        (provenance(tenant="team-b"), "of tenant team-b"),
        (provenance(result="cd" * 32), "and its results"),
    ],
)
def test_a_statement_of_another_job_tenant_or_results_is_named(
    tmp_path: Path, other: dict[str, Any], named: str
) -> None:
    signer = create_signer(tmp_path / "platform.key")
    folder = folder_with(tmp_path, sign_trial(TRIAL, provenance(), signer))
    with pytest.raises(TrialStatementError, match=named):
        signed_trial(folder, other, [signer.public_key])


def test_an_edited_rung_or_another_key_does_not_verify(tmp_path: Path) -> None:
    signer = create_signer(tmp_path / "platform.key")
    stranger = create_signer(tmp_path / "stranger.key")
    envelope = json.loads(sign_trial(TRIAL, provenance(), signer))
    payload = json.loads(base64.b64decode(envelope["payload"]))
    payload["predicate"]["rung"] = 5
    envelope["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    folder = folder_with(tmp_path, json.dumps(envelope).encode())
    with pytest.raises(TrialStatementError):
        signed_trial(folder, provenance(), [signer.public_key])
    folder = folder_with(tmp_path, sign_trial(TRIAL, provenance(), stranger))
    with pytest.raises(TrialStatementError):
        signed_trial(folder, provenance(), [signer.public_key])
