"""A learner's failure on a full ``/job`` says so: the note from the file system's free space."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller_sidecar.control import LearnerExit
from controller_sidecar.jobspace import full_note
from controller_sidecar.outcome import outcome_of

MIB = 1 << 20


def statvfs(blocks: int, available: int, files: int = 100, files_free: int = 50) -> os.statvfs_result:
    """A 4 KiB-block file system: its size and what an unprivileged user may still write, in blocks."""
    return os.statvfs_result((4096, 4096, blocks, available, available, files, files_free, files_free, 0, 255, 0))


@pytest.mark.parametrize(
    ("stats", "note"),
    [
        (statvfs(16384, 0), "/job is full (storage 64 MiB)"),
        (statvfs(16384, 255), "/job is full (storage 64 MiB)"),
        (statvfs(16384, 256), None),
        (statvfs(16384, 9000, files_free=0), "/job is full (storage 64 MiB)"),
        (statvfs(3 << 18, 0), "/job is full (storage 3 GiB)"),
    ],
)
def test_full_when_less_than_a_mebibyte_or_no_inode_is_left(
    monkeypatch: pytest.MonkeyPatch, stats: os.statvfs_result, note: str | None
) -> None:
    monkeypatch.setattr(os, "statvfs", lambda path: stats)
    assert full_note(Path("/job")) == note


def test_no_note_when_job_cannot_be_read(tmp_path: Path) -> None:
    assert full_note(tmp_path / "gone") is None


def test_a_failure_and_a_kill_carry_the_note_and_a_completion_does_not() -> None:
    note = "/job is full (storage 64 MiB)"
    failed = outcome_of(LearnerExit(1, "failed", error="No space left"), halt_requested=False, job_full=note)
    killed = outcome_of(LearnerExit(137, "killed"), halt_requested=False, oom_kills=0, job_full=note)
    completed = outcome_of(LearnerExit(0, "completed"), halt_requested=False, job_full=note)
    assert failed.message.endswith(f"; {note}") and killed.message.endswith(f"; {note}")
    assert completed.message == "completed"
