"""A job's provenance read by the standard tools: the envelope by securesystemslib and in-toto, the statement and
its SLSA predicate by in-toto-attestation, the model signature by model_signing's own command; and what the
documents say: three attempts of a job resumed twice, the factsheet's facts."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from google.protobuf import json_format
from in_toto.models.metadata import Metadata
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope

from learnerkit.common.signing import load_public_key, public_key_path
from learnerkit.scheduler.jobs.attempts import AttemptEnd
from tests.unit.scheduler.provenance.jobfolder import (
    EVAL_DATA,
    EVALUATOR_ID,
    EVALUATOR_IMAGE,
    LEARNER_ID,
    RESULT,
    download,
    evaluated_round,
    finished_job,
    marker_digest,
    report_bytes,
    sha,
)


def model_signing_verify(folder: Path, key: Path) -> subprocess.CompletedProcess[str]:
    """The stock command of the `model-signing` package, offline, key mode."""
    signature, public = folder / "provenance" / "model.sig", public_key_path(key)
    argv = [sys.executable, "-m", "model_signing", "verify", "key", "--signature", str(signature)]
    return subprocess.run(
        [*argv, "--public_key", str(public), str(folder)], capture_output=True, text=True, timeout=120
    )


def test_the_envelope_verifies_with_securesystemslib_and_in_toto_and_parses_as_slsa(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path)
    folder = download(store, tmp_path / "download")
    envelope = json.loads((folder / "provenance/provenance.intoto.json").read_text())
    public = load_public_key(public_key_path(key))
    assert Envelope.from_dict(json.loads(json.dumps(envelope))).verify([public], 1)
    Metadata.from_dict(json.loads(json.dumps(envelope))).verify_signature({**public.to_dict(), "keyid": public.keyid})
    payload = json.loads(base64.b64decode(envelope["payload"]))
    Statement.copy_from_pb(json_format.ParseDict(payload, statement_pb2.Statement())).validate()
    predicate = json_format.ParseDict(payload["predicate"], provenance_pb2.Provenance())
    [learner] = [d for d in predicate.build_definition.resolved_dependencies if d.name == "learner-image"]
    assert "sha256:" + learner.digest["sha256"] == LEARNER_ID
    assert payload["subject"] == [
        {"name": "attempt-1/learner-1/results/model.bin", "digest": {"sha256": sha(RESULT + b"1")}}
    ]
    [store] = payload["predicate"]["buildDefinition"]["externalParameters"]["manifest"]["data_stores"]
    assert store["connection"] == {"auth_url": "http://127.0.0.1:8333"}, "the manifest without its credentials"
    assert "secret" not in json.dumps(payload)


def test_the_model_signature_verifies_with_model_signings_own_command(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path, attempts=2)
    folder = download(store, tmp_path / "download")
    done = model_signing_verify(folder, key)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verification succeeded" in done.stdout
    result = folder / "attempt-2/learner-1/results/model.bin"
    result.write_bytes(result.read_bytes()[:-1] + b"X")
    done = model_signing_verify(folder, key)
    assert done.returncode != 0
    assert "attempt-2/learner-1/results/model.bin" in done.stdout + done.stderr


def test_a_job_resumed_twice_lists_three_attempts_each_with_its_checkpoint(tmp_path: Path) -> None:
    store, _key = finished_job(tmp_path, attempts=3)
    sheet = json.loads(store.objects["job-7/provenance/factsheet.json"])
    attempts = sheet["lineage"]["attempts"]
    assert [(a["number"], a["endedBy"], a["resumedFrom"], a["restoredStep"], a["nodes"]) for a in attempts] == [
        (1, "HALTED", None, None, ["node-1"]),
        (2, "HALTED", 1, 100, ["node-2"]),
        (3, "COMPLETED", 2, 200, ["node-3"]),
    ]
    assert [a["checkpointSha256"] for a in attempts] == [None, marker_digest(1), marker_digest(2)]
    assert attempts[1]["startedAt"] == "2026-01-01T02:01:00Z" and attempts[1]["endedAt"] == "2026-01-01T02:30:00Z"
    assert sheet["lineage"]["resumes"] == 2
    markdown = store.objects["job-7/provenance/factsheet.md"].decode()
    assert (
        "attempt 3: 2026-01-01T03:01:00Z to 2026-01-01T03:30:00Z, COMPLETED on node-3, resumed from attempt 2"
        in markdown
    )
    assert f"(checkpoint of step 200, marker sha256 `{marker_digest(2)}`)" in markdown


def test_a_preempted_attempt_is_named_with_its_preemptor(tmp_path: Path) -> None:
    store, _key = finished_job(tmp_path, attempts=2, earlier=AttemptEnd.PREEMPTED, reason="preempted by job job-9")
    sheet = json.loads(store.objects["job-7/provenance/factsheet.json"])
    attempts = sheet["lineage"]["attempts"]
    assert [(a["number"], a["endedBy"], a["reason"], a["resumedFrom"]) for a in attempts] == [
        (1, "PREEMPTED", "preempted by job job-9", None),
        (2, "COMPLETED", "", 1),
    ]
    assert sheet["lineage"]["preemptions"] == 1 and sheet["lineage"]["resumes"] == 1
    assert "PREEMPTED on node-1: preempted by job job-9" in store.objects["job-7/provenance/factsheet.md"].decode()


def test_the_factsheet_gives_purpose_data_image_and_metrics(tmp_path: Path) -> None:
    store, _key = finished_job(tmp_path)
    sheet = json.loads(store.objects["job-7/provenance/factsheet.json"])
    assert sheet["purpose"]["name"] == "mnist"
    assert sheet["image"] == {
        "reference": "learnerkit/pytorch:2.3-cpu-py3.11",
        "digest": {"sha256": LEARNER_ID.removeprefix("sha256:")},
        "scan": "passed",
    }
    assert [d["object"] for d in sheet["data"]] == ["s3://data/train/a.bin", "s3://data/train/b.bin"]
    assert sheet["metrics"] == {"loss": {"final": 0.4, "best": 0.4, "first": 0.9, "points": 2}}
    assert {c["name"] for c in sheet["code"]} == {"model/model.zip", "pypi:lkgreet"}


def test_the_packages_installed_at_start_are_resolved_dependencies_named_by_digest(tmp_path: Path) -> None:
    """What the sidecar's pip installed into /job/packages (its report: name, version, wheel sha256), as the
    sidecar's etcd record gave it, is in the signed statement: the image's locked packages are the image's."""
    store, _key = finished_job(tmp_path)
    envelope = json.loads(store.objects["job-7/provenance/provenance.intoto.json"])
    payload = json.loads(base64.b64decode(envelope["payload"]))
    dependencies = payload["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert [d for d in dependencies if d["name"].startswith("pypi:")] == [
        {"name": "pypi:lkgreet", "uri": "pkg:pypi/lkgreet@1.0", "digest": {"sha256": "c" * 64}}
    ]


def test_an_evaluation_round_verifies_with_securesystemslib_and_in_toto_and_parses_as_a_statement(
    tmp_path: Path,
) -> None:
    store, key = finished_job(tmp_path)
    evaluated_round(store, key, 1, verdict="failed")
    folder = download(store, tmp_path / "download")
    envelope = json.loads((folder / "provenance/evaluation-round-1.intoto.json").read_text())
    public = load_public_key(public_key_path(key))
    assert Envelope.from_dict(json.loads(json.dumps(envelope))).verify([public], 1)
    Metadata.from_dict(json.loads(json.dumps(envelope))).verify_signature({**public.to_dict(), "keyid": public.keyid})
    payload = json.loads(base64.b64decode(envelope["payload"]))
    Statement.copy_from_pb(json_format.ParseDict(payload, statement_pb2.Statement())).validate()
    model = json.loads(
        base64.b64decode(json.loads((folder / "provenance/model.sig").read_text())["dsseEnvelope"]["payload"])
    )
    assert payload["subject"] == [
        {"name": r["name"], "digest": {"sha256": r["digest"]}} for r in model["predicate"]["resources"]
    ], "the model as the model signature lists it"
    predicate = payload["predicate"]
    assert (predicate["round"], predicate["attempt"], predicate["verdict"]) == (1, 1, "failed")
    [evaluation] = predicate["evaluations"]
    assert evaluation["evaluatorImage"] == {
        "uri": f"docker-image://{EVALUATOR_IMAGE}",
        "digest": {"sha256": EVALUATOR_ID.removeprefix("sha256:")},
    }
    assert evaluation["data"] == [
        {"uri": "s3://data/eval/digits.csv", "digest": {"sha256": sha(EVAL_DATA)}, "annotations": {"size": 8}}
    ]
    [report] = evaluation["reports"]
    assert report["name"] == "evaluations/round-1/robust/results/evaluations/robust.json"
    assert report["digest"] == {"sha256": sha(report_bytes("failed"))}
    assert evaluation["failures"] == [{"metric": "accuracy", "value": 0.2, "threshold": 0.5}]
    assert evaluation["spec"] == {"name": "robust", "kind": "robustness"}
    done = model_signing_verify(folder, key)
    assert done.returncode == 0, "the evaluations a download holds are beside the model: " + done.stdout + done.stderr


def test_the_factsheet_lists_every_round_and_a_round_never_replaces_another(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path)
    evaluated_round(store, key, 1, verdict="failed")
    first = store.objects["job-7/provenance/evaluation-round-1.intoto.json"]
    evaluated_round(store, key, 2)
    assert store.objects["job-7/provenance/evaluation-round-1.intoto.json"] == first
    sheet = json.loads(store.objects["job-7/provenance/factsheet.json"])
    assert [(r["round"], r["verdict"], [e["verdict"] for e in r["evaluations"]]) for r in sheet["evaluations"]] == [
        (1, "failed", ["failed"]),
        (2, "passed", ["passed"]),
    ]
    markdown = store.objects["job-7/provenance/factsheet.md"].decode()
    assert "- round 1 (the model of attempt 1): failed\n  - robust (robustness): failed" in markdown
    assert "- round 2 (the model of attempt 1): passed" in markdown


def test_a_round_asked_again_after_a_restart_is_not_signed_again(tmp_path: Path) -> None:
    """A scheduler stopped after storing the statement, before recording so, asks again at its next start: the
    stored statement stays (an ECDSA signature differs every time, so a second signing would change the bytes)."""
    store, key = finished_job(tmp_path)
    evaluated_round(store, key, 1)
    first = store.objects["job-7/provenance/evaluation-round-1.intoto.json"]
    evaluated_round(store, key, 1)
    assert store.objects["job-7/provenance/evaluation-round-1.intoto.json"] == first
    sheet = json.loads(store.objects["job-7/provenance/factsheet.json"])
    assert [r["round"] for r in sheet["evaluations"]] == [1]
