"""The sidecar reads the learner's files under /job without following links: real files, links and FIFOs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller_sidecar.control import read_exit
from controller_sidecar.errors import UnsafeFileError
from controller_sidecar.jobfiles import open_learner_file, open_regular, read_regular, regular_files
from controller_sidecar.logtail import FileTailer
from controller_sidecar.tensorboard import EventFolder

pytestmark = pytest.mark.timeout(30)

SECRET = b"AWS_SECRET_ACCESS_KEY=sidecar-only\x00"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A /job with the learner's folders, and the sidecar's own secret file outside it."""
    for name in ("logs", "control", "results", "checkpoints"):
        (tmp_path / "job" / name).mkdir(parents=True)
    (tmp_path / "environ").write_bytes(SECRET)
    return tmp_path / "job"


def test_a_regular_file_is_read(job: Path) -> None:
    (job / "logs" / "learner.log").write_bytes(b"line\n")
    assert read_regular(job / "logs" / "learner.log") == b"line\n"


@pytest.mark.parametrize("target", ["environ", "/proc/self/environ"])
def test_a_link_in_place_of_a_file_is_refused(job: Path, target: str) -> None:
    log = job / "logs" / "learner.log"
    log.symlink_to(job.parent / target if not target.startswith("/") else target)
    with pytest.raises(UnsafeFileError, match=r"learner\.log: is a symbolic link, not a regular file"):
        open_regular(log)


def test_a_link_in_place_of_a_parent_folder_is_refused(job: Path) -> None:
    elsewhere = job.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "learner.log").write_bytes(SECRET)
    (job / "logs").rmdir()
    (job / "logs").symlink_to(elsewhere)
    with pytest.raises(UnsafeFileError, match=r"/job/logs: is a symbolic link, not a folder"):
        open_regular(job / "logs" / "learner.log")


def test_a_fifo_or_a_folder_is_refused_without_blocking(job: Path) -> None:
    os.mkfifo(job / "control" / "learner.exit")
    with pytest.raises(UnsafeFileError, match="is a special file"):
        read_exit(job / "control")
    (job / "logs" / "learner.log").mkdir()
    with pytest.raises(UnsafeFileError, match="is a folder, not a regular file"):
        open_regular(job / "logs" / "learner.log")


def test_an_exit_record_behind_a_link_is_not_read(job: Path) -> None:
    (job.parent / "record.json").write_text('{"exit_code": 0, "reason": "completed"}')
    (job / "control" / "learner.exit").symlink_to(job.parent / "record.json")
    with pytest.raises(UnsafeFileError, match=r"learner\.exit: is a symbolic link"):
        read_exit(job / "control")


def test_the_tailer_refuses_a_log_replaced_by_a_link_after_draining_the_real_one(job: Path) -> None:
    log = job / "logs" / "learner.log"
    log.write_bytes(b"first\n")
    tailer = FileTailer(log)
    assert tailer.read_new() == b"first\n"
    with log.open("ab") as out:
        out.write(b"second\n")
    log.unlink()
    log.symlink_to(job.parent / "environ")
    assert tailer.read_new() == b"second\n"
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        tailer.read_new()


def test_the_tailer_refuses_a_link_from_the_start(job: Path) -> None:
    (job / "logs" / "metrics.jsonl").symlink_to("/proc/self/environ")
    with pytest.raises(UnsafeFileError, match=r"metrics\.jsonl: is a symbolic link"):
        FileTailer(job / "logs" / "metrics.jsonl").read_new()


def test_a_walk_skips_links_and_special_files_with_a_warning(job: Path, caplog: pytest.LogCaptureFixture) -> None:
    results = job / "results"
    (results / "sub").mkdir()
    (results / "sub" / "kept.txt").write_text("kept")
    (results / "model.pt").write_bytes(b"weights")
    (results / "environ").symlink_to("/proc/self/environ")
    (results / "proc").symlink_to("/proc/self")
    (results / "secret").symlink_to(job.parent / "environ")
    os.mkfifo(results / "pipe")
    (results / ".tmp-x").mkdir()
    (results / ".tmp-x" / "half").write_text("half")
    caplog.set_level("WARNING", logger="controller_sidecar.jobfiles")
    assert regular_files(results, skip_folder=lambda name: name.startswith(".tmp-")) == ["model.pt", "sub/kept.txt"]
    skipped = sorted(record.getMessage().split(":")[1].strip() for record in caplog.records)
    assert skipped == sorted(str(results / name) for name in ("environ", "proc", "secret", "pipe"))


def test_a_linked_folder_to_walk_is_refused_and_a_vanished_file_skipped(job: Path) -> None:
    (job / "results").rmdir()
    (job / "results").symlink_to(job.parent)
    with pytest.raises(UnsafeFileError, match="results: is a symbolic link"):
        regular_files(job / "results")
    assert regular_files(job / "missing") == []
    assert open_learner_file(job / "logs" / "gone") is None
    with pytest.raises(FileNotFoundError):
        open_learner_file(job / "logs" / "gone", gone_ok=False)


def test_a_planted_link_is_warned_about_once_however_often_it_is_polled(
    job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 D18: the tensorboard follower warned about the same link on every poll (215 lines in 25 s)."""
    events = job / "logs" / "tb"
    events.mkdir()
    (events / "events.out.tfevents.1.host").symlink_to("/proc/self/environ")
    (events / "other").symlink_to(job.parent / "environ")
    (job / "results" / "linked").symlink_to(job / "logs")
    folder, linked = EventFolder(events), EventFolder(job / "results" / "linked")
    caplog.set_level("WARNING")
    for _ in range(200):
        assert folder.poll() == []
        assert linked.poll() == []
        assert regular_files(job / "results") == []
    warned = sorted(record.getMessage() for record in caplog.records)
    assert len(warned) == 3, warned
    assert sum(str(events / "other") in line for line in warned) == 1
    assert sum(str(job / "results" / "linked") in line for line in warned) == 1


def test_a_log_held_before_start_ships_what_was_written_before_a_swap_for_a_link(job: Path) -> None:
    """Issue 27 (flaky test_pair_boundary[log]): a learner that writes a line and at once swaps its log for a
    link lost that line when the sidecar's first read came after the swap."""
    log = job / "logs" / "learner.log"
    tailer = FileTailer(log)
    tailer.hold(create=True)  # the sidecar, before it writes control/start
    assert log.is_file() and log.stat().st_mode & 0o777 == 0o664
    with log.open("ab") as learner:  # learner-run: O_APPEND | O_CREAT, the same file
        learner.write(b"before\n")
        log.unlink()
        log.symlink_to(job.parent / "environ")
        learner.write(b"after the swap, still the learner's own file\n")
    assert tailer.read_new() == b"before\nafter the swap, still the learner's own file\n"
    with pytest.raises(UnsafeFileError, match=r"learner\.log: is a symbolic link"):
        tailer.read_new()


def test_holding_a_log_that_is_a_link_is_refused(job: Path) -> None:
    (job / "logs" / "learner.log").symlink_to(job.parent / "environ")
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        FileTailer(job / "logs" / "learner.log").hold(create=True)
