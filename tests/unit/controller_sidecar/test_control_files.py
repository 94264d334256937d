"""Control files and the sidecar's progress record: atomic, and readable after a restart."""

from __future__ import annotations

import json
from pathlib import Path

from controller_sidecar.control import read_exit, signal_halt, signal_start, start_signalled
from controller_sidecar.progress import ProgressFile


def test_start_and_halt_files_appear_whole(tmp_path: Path) -> None:
    assert not start_signalled(tmp_path)
    signal_start(tmp_path)
    signal_halt(tmp_path)
    assert start_signalled(tmp_path) and (tmp_path / "halt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_read_exit_parses_learner_run_record(tmp_path: Path) -> None:
    assert read_exit(tmp_path) is None
    record = {"exit_code": 143, "signal": "SIGTERM", "reason": "halted", "halt_requested": True, "error": None}
    (tmp_path / "learner.exit").write_text(json.dumps(record))
    parsed = read_exit(tmp_path)
    assert parsed is not None and (parsed.exit_code, parsed.reason, parsed.halt_requested) == (143, "halted", True)


def test_malformed_exit_record_reads_as_failure_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "learner.exit").write_text("{not json")
    parsed = read_exit(tmp_path)
    assert parsed is not None and parsed.reason == "failed" and "learner.exit" in (parsed.error or "")


def test_progress_survives_a_restart(tmp_path: Path) -> None:
    ProgressFile(tmp_path).update(inputs_ready=True, restored_step=40)
    again = ProgressFile(tmp_path).current
    assert again.inputs_ready and again.restored_step == 40 and not again.started
