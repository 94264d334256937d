"""The tamper matrix: one byte changed in any item the provenance names makes `verify_folder` fail naming that item,
and an untouched folder passes."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common.signing import load_public_key, public_key_path
from learnerkit.scheduler.provenance.verify import (
    Check,
    DataAnswer,
    DataLookup,
    ImageAnswer,
    ImageLookup,
    NoProvenanceError,
    State,
    verify_folder,
)
from tests.unit.scheduler.provenance.jobfolder import (
    EVAL_DATA,
    EVALUATOR_ID,
    EVALUATOR_IMAGE,
    LEARNER_ID,
    LEARNER_IMAGE,
    SIDECAR_ID,
    data_copy,
    download,
    evaluated_round,
    finished_job,
)

RESULT_FILE = "attempt-1/learner-1/results/model.bin"


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def engine(changed: str | None = None) -> ImageLookup:
    def lookup(reference: str) -> ImageAnswer:
        held = {LEARNER_IMAGE: changed or LEARNER_ID, EVALUATOR_IMAGE: EVALUATOR_ID}.get(reference, SIDECAR_ID)
        return ImageAnswer("the engine", frozenset({held}))

    return lookup


@pytest.fixture
def job(tmp_path: Path) -> tuple[Path, Path, Path]:
    store, key = finished_job(tmp_path)
    return download(store, tmp_path / "download"), data_copy(tmp_path / "data"), key


def verified(job: tuple[Path, Path, Path], lookup: ImageLookup | None = None) -> list[str]:
    folder, data, key = job
    report = verify_folder(folder, load_public_key(public_key_path(key)), data=data, image_digest=lookup or engine())
    assert report.ok == (not report.failed)
    return [check.item for check in report.changed]


def test_an_untouched_folder_verifies_and_every_item_is_checked(job: tuple[Path, Path, Path]) -> None:
    folder, data, key = job
    report = verify_folder(folder, load_public_key(public_key_path(key)), data=data, image_digest=engine())
    assert report.ok, report.changed
    states = {check.item: check.state for check in report.checks}
    assert set(states.values()) == {State.OK}, states
    for item in (
        "provenance signature",
        "result attempt-1/learner-1/results/model.bin",
        "model signature provenance/model.sig",
        "manifest",
        "metric history attempt-1/learner-1/logs/metrics.jsonl",
        "log attempt-1/learner-1/logs/learner.log",
        "training data s3://data/train/a.bin",
        "training data s3://data/train/b.bin",
        "model code model/model.zip",
        f"learner image {LEARNER_IMAGE}",
        "sidecar image learnerkit/sidecar:0.1.0",
    ):
        assert item in states, item


@pytest.mark.parametrize(
    ("where", "named"),
    [
        ("attempt-1/learner-1/results/model.bin", "result attempt-1/learner-1/results/model.bin"),
        ("data:train/a.bin", "training data s3://data/train/a.bin"),
        ("provenance/manifest.json", "manifest"),
        ("model/model.zip", "model code model/model.zip"),
        ("attempt-1/learner-1/logs/metrics.jsonl", "metric history attempt-1/learner-1/logs/metrics.jsonl"),
        ("attempt-1/learner-1/logs/learner.log.part-000001", "log attempt-1/learner-1/logs/learner.log"),
    ],
)
def test_one_byte_changed_fails_naming_the_item(job: tuple[Path, Path, Path], where: str, named: str) -> None:
    folder, data, _key = job
    flip(data / where.removeprefix("data:") if where.startswith("data:") else folder / where)
    changed = verified(job)
    assert named in changed
    if not where.endswith("model.bin"):
        assert changed == [named]


def test_a_changed_result_also_breaks_the_model_signature_check_with_the_standard_tool_only(
    job: tuple[Path, Path, Path],
) -> None:
    """The model signature lists digests; `verify_folder` compares it with the provenance, the files themselves are
    hashed once (the stock `model_signing` command hashes them again: tests/unit/.../test_interop.py)."""
    folder = job[0]
    flip(folder / "attempt-1/learner-1/results/model.bin")
    assert verified(job) == ["result attempt-1/learner-1/results/model.bin"]


def test_another_image_under_the_reference_fails_naming_the_image(job: tuple[Path, Path, Path]) -> None:
    assert verified(job, engine(changed="sha256:" + "9" * 64)) == [f"learner image {LEARNER_IMAGE}"]


def test_a_changed_statement_or_model_signature_fails_its_signature(job: tuple[Path, Path, Path]) -> None:
    folder = job[0]
    signature = folder / "provenance/model.sig"
    bundle = json.loads(signature.read_text())
    bundle["dsseEnvelope"]["payload"] = bundle["dsseEnvelope"]["payload"][:-8] + "AAAAAAA="
    signature.write_text(json.dumps(bundle))
    assert verified(job) == ["model signature provenance/model.sig"]
    envelope_path = folder / "provenance/provenance.intoto.json"
    envelope = json.loads(envelope_path.read_text())
    envelope["signatures"][0]["sig"] = envelope["signatures"][0]["sig"][::-1]
    envelope_path.write_text(json.dumps(envelope))
    assert verified(job) == ["provenance signature"]


def test_items_the_folder_lacks_are_not_checked_not_failed(job: tuple[Path, Path, Path]) -> None:
    folder, _data, key = job
    (folder / "model/model.zip").unlink()
    report = verify_folder(folder, load_public_key(public_key_path(key)))
    assert report.ok
    skipped = {c.item: c.detail for c in report.checks if c.state is State.NOT_CHECKED}
    assert skipped["model code model/model.zip"] == "not in the folder"
    assert skipped["training data s3://data/train/a.bin"] == "no local copy given (--data)"
    assert skipped[f"learner image {LEARNER_IMAGE}"] == "no engine or registry to ask"


def test_a_folder_without_provenance_says_so(tmp_path: Path, job: tuple[Path, Path, Path]) -> None:
    with pytest.raises(NoProvenanceError, match=r"no provenance here \(provenance/provenance.intoto.json is missing\)"):
        verify_folder(tmp_path / "empty", load_public_key(public_key_path(job[2])))


REPORT = "evaluations/round-1/robust/results/evaluations/robust.json"


@pytest.fixture
def evaluated(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A job whose model was evaluated twice (after training, and again by `job evaluate`)."""
    store, key = finished_job(tmp_path)
    evaluated_round(store, key, 1)
    evaluated_round(store, key, 2, verdict="failed")
    return download(store, tmp_path / "download"), data_copy(tmp_path / "data"), key


def test_each_evaluation_round_is_checked_and_an_untouched_one_passes(evaluated: tuple[Path, Path, Path]) -> None:
    folder, data, key = evaluated
    report = verify_folder(folder, load_public_key(public_key_path(key)), data=data, image_digest=engine())
    assert report.ok, report.changed
    states = {check.item: check.state for check in report.checks}
    for item in (
        "evaluation round 1 signature",
        "evaluation round 2 signature",
        f"evaluation report {REPORT}",
        "evaluation report evaluations/round-2/robust/results/evaluations/robust.json",
        f"evaluator image {EVALUATOR_IMAGE}",
    ):
        assert states.get(item) is State.OK, item


def test_a_report_byte_changed_fails_naming_the_report(evaluated: tuple[Path, Path, Path]) -> None:
    flip(evaluated[0] / REPORT)
    assert verified(evaluated) == [f"evaluation report {REPORT}"]


def test_a_verdict_changed_in_a_round_statement_fails_its_signature(evaluated: tuple[Path, Path, Path]) -> None:
    path = evaluated[0] / "provenance/evaluation-round-2.intoto.json"
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicate"]["evaluations"][0]["verdict"] == "failed"
    statement["predicate"]["evaluations"][0]["verdict"] = "passed"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(json.dumps(envelope))
    # the factsheet lists the round as signed, which no statement that verifies confirms any more
    assert verified(evaluated) == [
        "evaluation round 2 signature",
        "factsheet provenance/factsheet.json",
        "factsheet provenance/factsheet.md",
    ]


def test_another_evaluator_image_under_its_reference_fails_naming_it(evaluated: tuple[Path, Path, Path]) -> None:
    def lookup(reference: str) -> ImageAnswer:
        if reference == EVALUATOR_IMAGE:
            return ImageAnswer("the engine", frozenset({"sha256:" + "8" * 64}))
        return engine()(reference)

    assert verified(evaluated, lookup) == [f"evaluator image {EVALUATOR_IMAGE}"] * 2


def test_an_image_whose_registry_cannot_be_reached_is_named_not_checked(job: tuple[Path, Path, Path]) -> None:
    def lookup(reference: str) -> ImageAnswer:
        if reference == LEARNER_IMAGE:
            return ImageAnswer("registry 127.0.0.1:9", problem="connection refused")
        return engine()(reference)

    folder, data, key = job
    report = verify_folder(folder, load_public_key(public_key_path(key)), data=data, image_digest=lookup)
    assert report.ok
    states = {check.item: (check.state, check.detail) for check in report.checks}
    assert states[f"learner image {LEARNER_IMAGE}"] == (
        State.NOT_CHECKED,
        "registry 127.0.0.1:9 cannot be asked: connection refused",
    )


EVAL_URI = "s3://data/eval/digits.csv"
EVAL_DATA_ITEMS = [f"evaluation round {n} data {EVAL_URI}" for n in (1, 2)]


def store_holding(content: bytes) -> DataLookup:
    """The evaluation data as its store holds it now, hashed as `job verify JOB` hashes what the scheduler streams."""

    def lookup(uri: str) -> DataAnswer:
        if uri != EVAL_URI:
            return DataAnswer(problem=f"no evaluation round statement lists {uri!r}")
        return DataAnswer(hashlib.sha256(content).hexdigest())

    return lookup


def data_checks(evaluated: tuple[Path, Path, Path], lookup: DataLookup | None) -> tuple[list[str], dict[str, Check]]:
    folder, data, key = evaluated
    report = verify_folder(
        folder, load_public_key(public_key_path(key)), data=data, image_digest=engine(), evaluation_data=lookup
    )
    return [c.item for c in report.changed], {c.item: c for c in report.checks if c.item in EVAL_DATA_ITEMS}


def test_evaluation_data_as_its_store_holds_it_verifies(evaluated: tuple[Path, Path, Path]) -> None:
    changed, checks = data_checks(evaluated, store_holding(EVAL_DATA))
    assert changed == []
    assert {item: check.state for item, check in checks.items()} == dict.fromkeys(EVAL_DATA_ITEMS, State.OK)


def test_a_byte_changed_in_the_evaluation_data_fails_naming_the_object(evaluated: tuple[Path, Path, Path]) -> None:
    changed_data = bytearray(EVAL_DATA)
    changed_data[2] ^= 0x01
    changed, checks = data_checks(evaluated, store_holding(bytes(changed_data)))
    assert changed == EVAL_DATA_ITEMS
    assert checks[EVAL_DATA_ITEMS[0]].detail.endswith(f"the round used {hashlib.sha256(EVAL_DATA).hexdigest()}")


def test_evaluation_data_with_no_store_to_read_is_not_checked_saying_why(evaluated: tuple[Path, Path, Path]) -> None:
    _, checks = data_checks(evaluated, None)
    assert {(c.state, c.detail) for c in checks.values()} == {
        (State.NOT_CHECKED, "read from its store only when verifying by job id")
    }

    def unreachable(uri: str) -> DataAnswer:
        return DataAnswer(problem="job job-7: its object store does not answer; try again shortly")

    _, checks = data_checks(evaluated, unreachable)
    assert {(c.state, c.detail) for c in checks.values()} == {
        (State.NOT_CHECKED, "job job-7: its object store does not answer; try again shortly")
    }


def report_of(folder: Path, key: Path, *, partial: bool = False) -> dict[str, Any]:
    return verify_folder(folder, load_public_key(public_key_path(key)), partial=partial).to_dict()


def test_a_deleted_result_fails_naming_it_and_partial_verifies_the_rest(job: tuple[Path, Path, Path]) -> None:
    folder, _data, key = job
    (folder / RESULT_FILE).unlink()
    strict = report_of(folder, key)
    assert (strict["verified"], strict["missing"], strict["changed"]) == (False, [f"result {RESULT_FILE}"], [])
    partial = report_of(folder, key, partial=True)
    assert (partial["verified"], partial["missing"]) == (True, [f"result {RESULT_FILE}"])


def test_a_result_and_its_bucket_record_rewritten_before_the_signature_are_caught(tmp_path: Path) -> None:
    """The tenant rewrites a result and the sidecar's copy of the record in its bucket while the job is halted; the
    statement is made from the records in etcd, so the forged result does not match it."""
    store, key = finished_job(tmp_path, attempts=2, tamper=1)
    folder = download(store, tmp_path / "download")
    found = report_of(folder, key)
    assert found["verified"] is False
    assert found["changed"] == ["result attempt-1/learner-1/results/model.bin"]


def test_an_incomplete_statement_fails_naming_the_learner_unless_partial(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path, attempts=2, lose_record=1)
    folder = download(store, tmp_path / "download")
    strict = verify_folder(folder, load_public_key(public_key_path(key)))
    [gap] = [c for c in strict.checks if c.state is State.INCOMPLETE]
    assert gap.item == "completeness" and "attempt 1 learner 1: its sidecar started and put no record" in gap.detail
    assert not strict.ok and strict.to_dict()["complete"] is False
    assert "file attempt-1/learner-1/results/model.bin" in strict.to_dict()["unsigned"]
    assert verify_folder(folder, load_public_key(public_key_path(key)), partial=True).ok


def test_files_no_statement_names_are_listed_unsigned_without_failing(job: tuple[Path, Path, Path]) -> None:
    folder, _data, key = job
    (folder / "attempt-1/learner-1/checkpoints/ckpt-1").mkdir(parents=True)
    (folder / "attempt-1/learner-1/checkpoints/ckpt-1/weights").write_bytes(b"w")
    (folder / "attempt-1/learner-1/results/extra.txt").write_bytes(b"the tenant's own")
    found = report_of(folder, key)
    assert found["verified"] is True
    assert found["unsigned"] == [
        "file attempt-1/learner-1/checkpoints/ckpt-1/weights",
        "file attempt-1/learner-1/results/extra.txt",
    ]


@pytest.mark.parametrize("name", ["provenance/factsheet.json", "provenance/factsheet.md"])
def test_a_factsheet_not_rendered_from_the_signed_statement_fails(job: tuple[Path, Path, Path], name: str) -> None:
    folder, _data, key = job
    path = folder / name
    path.write_text(path.read_text().replace("mnist", "imagenet"))
    assert report_of(folder, key)["changed"] == [f"factsheet {name}"]
