"""FileTailer and LineSplitter: byte-exact following of a log through everything that happens to log files."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
from watchdog.events import FileCreatedEvent, FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from controller_sidecar.logtail import READ_CHUNK_BYTES, WAKE_EVENTS, FileTailer, FileWakeup, LineSplitter

pytestmark = pytest.mark.timeout(30)


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_missing_file_then_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    tailer = FileTailer(log)
    assert tailer.read_new() == b""
    assert tailer.inode is None
    append(log, b"epoch 1 lo")
    assert tailer.read_new() == b"epoch 1 lo"
    assert tailer.read_new() == b""
    append(log, b"ss=0.5\nepoch 2")
    assert tailer.read_new() == b"ss=0.5\nepoch 2"
    assert tailer.offset == len(b"epoch 1 loss=0.5\nepoch 2")


def test_starts_at_offset_and_ignores_it_for_another_inode(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    log.write_bytes(b"0123456789")
    assert FileTailer(log, 4, inode=log.stat().st_ino).read_new() == b"456789"
    other = FileTailer(log, 4, inode=log.stat().st_ino + 1)
    assert other.read_new() == b"0123456789"
    assert other.resets == 1


def test_truncation_restarts_at_zero(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    log.write_bytes(b"a long first life of the log\n")
    tailer = FileTailer(log)
    tailer.read_new()
    log.write_bytes(b"short\n")  # truncates in place: same inode, smaller size
    assert tailer.read_new() == b"short\n"
    assert tailer.resets == 1


def test_rotation_drains_the_old_file_then_follows_the_new(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    log.write_bytes(b"old 1\n")
    tailer = FileTailer(log)
    assert tailer.read_new() == b"old 1\n"
    old_inode = tailer.inode
    append(log, b"old 2\n")  # written before the rename, not yet read
    log.rename(tmp_path / "learner.log.1")
    append(tmp_path / "learner.log.1", b"old 3\n")  # a writer still holding the old file
    assert tailer.read_new() == b"old 2\nold 3\n"  # the path is gone: keep following the old file
    log.write_bytes(b"new 1\n")
    assert tailer.read_new() == b"new 1\n"
    assert tailer.inode != old_inode
    assert tailer.offset == len(b"new 1\n")


def test_huge_append_is_read_in_bounded_pieces(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    data = os.urandom(3 * READ_CHUNK_BYTES + 17)
    log.write_bytes(data)
    tailer = FileTailer(log)
    pieces = []
    while piece := tailer.read_new(max_bytes=READ_CHUNK_BYTES // 2 + 1):
        assert len(piece) <= READ_CHUNK_BYTES // 2 + 1
        pieces.append(piece)
    assert b"".join(pieces) == data


def test_splitter_keeps_the_partial_tail() -> None:
    splitter = LineSplitter(max_line_bytes=100)
    assert splitter.feed(b"a\nb") == [b"a\n"]
    assert splitter.feed(b"c\n\nd") == [b"bc\n", b"\n"]
    assert splitter.feed(b"") == []
    assert splitter.flush() == [b"d"]
    assert splitter.flush() == []


@pytest.mark.parametrize("feed_size", [1, 3, 7, 1000])
def test_splitter_cuts_long_lines_and_loses_nothing(feed_size: int) -> None:
    stream = b"short\n" + b"L" * 23 + b"\n" + b"M" * 20 + b"\n\xff\xfe tail"
    splitter = LineSplitter(max_line_bytes=10)
    records: list[bytes] = []
    for start in range(0, len(stream), feed_size):
        records += splitter.feed(stream[start : start + feed_size])
    records += splitter.flush()
    assert b"".join(records) == stream
    assert records[:4] == [b"short\n", b"L" * 10, b"L" * 10, b"LLL\n"]
    assert records[4:6] == [b"M" * 10, b"M" * 10 + b"\n"]  # exactly max_line_bytes: not cut
    assert all(len(record.removesuffix(b"\n")) <= 10 for record in records)


def test_wakeup_hints_when_the_log_is_made_or_rotated(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"

    async def scenario() -> None:
        async with FileWakeup([log]) as wakeup:
            waiting = asyncio.create_task(wakeup.wait(60))
            await asyncio.to_thread(append, log, b"line\n")  # made: a hint
            await asyncio.wait_for(waiting, 10)  # long before the 60 s poll interval
            waiting = asyncio.create_task(wakeup.wait(60))
            await asyncio.to_thread(log.rename, tmp_path / "learner.log.1")
            await asyncio.wait_for(waiting, 10)

    asyncio.run(scenario())


def test_the_wake_events_leave_out_opens_closes_and_writes(tmp_path: Path) -> None:
    """The learner opens, appends to and closes metrics.jsonl at every step, and writes learner.log, beside each
    other: the watch asks the kernel for creations, renames and removals only, so none of that reaches watchdog."""
    log = tmp_path / "learner.log"
    log.write_bytes(b"")
    barrier = tmp_path / "barrier"
    seen: list[FileSystemEvent] = []
    created = threading.Event()

    class Recorder(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            seen.append(event)
            if isinstance(event, FileCreatedEvent) and os.fsdecode(event.src_path) == str(barrier):
                created.set()

    observer = Observer()
    observer.schedule(Recorder(), str(tmp_path), event_filter=WAKE_EVENTS)
    observer.start()
    try:
        for _ in range(3):
            log.read_bytes()  # an open and a close, nothing written
            append(log, b"line\n")
        barrier.write_bytes(b"")  # inotify delivers in order: anything before this is recorded by then
        assert created.wait(10)
    finally:
        observer.stop()
        observer.join()
    assert {type(event) for event in seen} <= set(WAKE_EVENTS), seen
    assert [os.fsdecode(event.src_path) for event in seen] == [str(barrier)], seen
