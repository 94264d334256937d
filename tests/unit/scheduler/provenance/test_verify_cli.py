"""`job verify DIR` as a user runs it: exit 0 only for a complete, untouched folder; 1 naming a deleted result or an
incomplete statement; `--partial` verifies what is there, saying what is not; unsigned files listed, never failing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.signing import public_key_path
from learnerkit.scheduler.client import imagedigest
from learnerkit.scheduler.provenance.verify import ImageAnswer
from tests.unit.scheduler.provenance.jobfolder import download, finished_job

RESULT = "attempt-1/learner-1/results/model.bin"


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs name made-up image IDs: this host's engine (which may hold a real sidecar:0.1.0) is not asked."""
    monkeypatch.setattr(imagedigest, "image_answer", lambda reference: ImageAnswer("no engine", problem="not asked"))


def verify(folder: Path, key: Path, *args: str) -> tuple[int, str]:
    env = {"LEARNERKIT_SCHEDULER_URL": "http://127.0.0.1:9", "COLUMNS": "80"}
    argv = ["job", "verify", str(folder), "--public-key", str(public_key_path(key)), *args]
    result = CliRunner().invoke(cli, argv, env=env)
    return result.exit_code, result.output


def test_a_complete_untouched_folder_exits_0_and_lists_unsigned_files(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path)
    folder = download(store, tmp_path / "job")
    (folder / "attempt-1/learner-1/results/notes.txt").write_text("added after the job")
    code, out = verify(folder, key)
    assert code == 0, out
    assert "unsigned file attempt-1/learner-1/results/notes.txt" in out and "verified (key" in out


def test_a_folder_of_unsigned_checkpoints_is_one_line_and_json_names_every_file(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path)
    folder = download(store, tmp_path / "job")
    checkpoints = folder / "attempt-1/learner-1/checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    names = [f"step-{n:05d}.pt" for n in range(12)]
    for name in names:
        (checkpoints / name).write_text(name)
    (folder / "attempt-1/learner-1/results/notes.txt").write_text("added after the job")
    code, out = verify(folder, key)
    assert code == 0, out
    lines = out.splitlines()
    at = lines.index("unsigned 12 files in attempt-1/learner-1/checkpoints/")  # too long for 80 with its detail
    assert lines[at + 1] == "  no statement names them (not verified)", out
    flat = " ".join(out.split())
    assert "step-00000.pt" not in out and "unsigned file attempt-1/learner-1/results/notes.txt" in flat
    code, out = verify(folder, key, "-o", "json")
    unsigned = json.loads(out)["unsigned"]
    assert [f"file attempt-1/learner-1/checkpoints/{name}" for name in names] == [
        item for item in unsigned if "/checkpoints/" in item
    ]


def test_a_deleted_result_exits_1_naming_it_and_partial_exits_0_saying_so(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path)
    folder = download(store, tmp_path / "job")
    (folder / RESULT).unlink()
    code, out = verify(folder, key, "-o", "json")
    assert code == 1 and json.loads(out)["missing"] == [f"result {RESULT}"], out
    code, out = verify(folder, key, "--partial")
    assert code == 0, out
    assert f"missing result {RESULT}" in " ".join(out.split()) and "verified in part (--partial): 1 missing" in out


def test_an_incomplete_statement_exits_1_naming_the_learner(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path, attempts=2, lose_record=1)
    code, out = verify(download(store, tmp_path / "job"), key)
    assert code == 1, out
    flat = " ".join(out.split())
    assert "attempt 1 learner 1: its sidecar started and put no record" in flat
    assert "not verified: the statement is incomplete" in flat
