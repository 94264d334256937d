"""LogShipper: every byte of learner.log reaches the store once, in order, through restarts and store errors."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
from pathlib import Path

import pytest

from controller_sidecar.errors import PermanentError, TransientError, UnsafeFileError
from controller_sidecar.logship import LogShipper, ShipState, assemble_log, part_name, structured_line
from tests.fakeclock import FakeClock
from tests.unit.controller_sidecar.memsink import MemorySink, measure_lines_per_second

pytestmark = pytest.mark.timeout(120)

MB = 1 << 20


class Crash(Exception):
    """The sidecar dies right after the store confirmed a part, before it recorded the part."""


def test_50mb_log_with_binary_bytes_and_a_10mb_line_arrives_identical(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "learner.log"
    log.parent.mkdir()
    rng = random.Random(7)
    # Random bytes: a \n about every 256 bytes and plenty of invalid UTF-8; one 10 MB line in the middle.
    content = os.urandom(20 * MB) + b"\n" + (b"\xff\xfe\x80 " * (10 * MB // 4)) + b"\n" + os.urandom(20 * MB - 2)
    sink = MemorySink()
    lines = hashlib.sha256()
    longest = 0

    def on_lines(batch: list[bytes]) -> None:
        nonlocal longest
        for line in batch:
            lines.update(line)
            longest = max(longest, len(line))

    def write() -> None:
        with log.open("ab", buffering=0) as handle:
            position = 0
            while position < len(content):
                size = rng.randint(1, 2 * MB)
                handle.write(content[position : position + size])
                position += size

    async def scenario() -> None:
        shipper = LogShipper(
            log, tmp_path / "control" / "ship.json", sink, interval_s=0.05, chunk_bytes=4 * MB, on_lines=on_lines
        )
        stop = asyncio.Event()
        running = asyncio.create_task(shipper.run(stop))
        await asyncio.to_thread(write)
        stop.set()
        await asyncio.wait_for(running, 60)
        assert shipper.state.bytes_shipped == len(content)
        assert shipper.state.offset == len(content)

    asyncio.run(scenario())
    assert len(content) == 50 * MB
    assert sink.assembled() == content
    assert all(len(data) <= 4 * MB for data in sink.objects.values())
    assert len(sink.objects) >= 13  # 50 MB in parts of at most 4 MB
    assert lines.digest() == hashlib.sha256(content).digest()  # on_lines saw every byte, in order
    assert longest <= 64 * 1024 + 1  # the 10 MB line reached on_lines in pieces


def test_restart_resumes_with_no_loss_and_no_duplicates(tmp_path: Path) -> None:
    log, state = tmp_path / "learner.log", tmp_path / "control" / "ship.json"
    sink = MemorySink()
    log.write_bytes(b"first life\n")
    asyncio.run(LogShipper(log, state, sink, interval_s=1).flush())
    assert json.loads(state.read_text()) == {
        "offset": 11,
        "inode": log.stat().st_ino,
        "next_part": 2,
        "bytes_shipped": 11,
    }

    async def confirmed_then_crash(name: str, data: bytes) -> None:
        await sink(name, data)
        raise Crash(name)

    with log.open("ab") as handle:
        handle.write(b"shipped, but never recorded\n")
    with pytest.raises(Crash):
        asyncio.run(LogShipper(log, state, confirmed_then_crash, interval_s=1).flush())
    assert ShipState.load(state).next_part == 2  # the crash came before the record

    with log.open("ab") as handle:
        handle.write(b"after the restart\n")
    asyncio.run(LogShipper(log, state, sink, interval_s=1).flush())  # part 2 again, now longer
    asyncio.run(LogShipper(log, state, sink, interval_s=1).flush())  # nothing new: ships nothing
    assert sink.assembled() == log.read_bytes()
    assert sorted(sink.objects) == [part_name(1), part_name(2)]
    assert sink.puts == [part_name(1), part_name(2), part_name(2)]


def test_lines_emitted_before_a_restart_are_not_emitted_again(tmp_path: Path) -> None:
    """Part 1 is confirmed, part 2 (which ends inside a line) is not: the restart ships part 2 again, but
    on_lines (stdout, the regex metrics) gets only what the killed sidecar had not emitted."""
    log, state = tmp_path / "learner.log", tmp_path / "control" / "ship.json"
    log.write_bytes(b"one\ntwo\nthree\nfour and")
    sink = MemorySink()
    emitted: list[bytes] = []

    async def second_part_crashes(name: str, data: bytes) -> None:
        if name == part_name(2):
            raise Crash(name)
        await sink(name, data)

    first = LogShipper(log, state, second_part_crashes, interval_s=1, chunk_bytes=8, on_lines=emitted.extend)
    with pytest.raises(Crash):
        asyncio.run(first.flush())
    assert (ShipState.load(state).offset, emitted) == (8, [b"one\n", b"two\n", b"three\n"])

    with log.open("ab") as handle:
        handle.write(b" more\nfive\n")
    second = LogShipper(log, state, sink, interval_s=1, chunk_bytes=8, on_lines=emitted.extend)
    asyncio.run(second.flush())
    assert emitted == [b"one\n", b"two\n", b"three\n", b"four and more\n", b"five\n"]
    assert sink.assembled() == log.read_bytes()


def test_transient_sink_errors_are_retried_without_loss_or_reordering(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    sink = MemorySink()
    failures = {part_name(1): 2, part_name(3): 1}
    retries: list[int] = []

    async def flaky(name: str, data: bytes) -> None:
        if failures.get(name, 0) > 0:
            failures[name] -= 1
            raise TransientError(f"503 for {name}")
        await sink(name, data)

    clock = FakeClock()
    content = b"".join(b"line %d \xff\n" % i for i in range(5000))
    log.write_bytes(content)
    shipper = LogShipper(
        log,
        tmp_path / "ship.json",
        flaky,
        interval_s=1,
        chunk_bytes=20_000,
        clock=clock,
        on_retry=lambda attempt, _: retries.append(attempt),
    )
    asyncio.run(shipper.flush())
    assert sink.assembled() == content
    assert sink.puts == [part_name(n) for n in range(1, len(sink.puts) + 1)]  # each part once, in order
    assert retries == [1, 2, 1]
    assert len(clock.sleeps) == 3  # backoff on the fake clock: no wall time spent


def test_a_permanent_sink_error_stops_shipping_and_records_nothing(tmp_path: Path) -> None:
    log, state = tmp_path / "learner.log", tmp_path / "ship.json"
    log.write_bytes(b"data\n")

    async def denied(name: str, data: bytes) -> None:
        raise PermanentError("AccessDenied")

    with pytest.raises(PermanentError):
        asyncio.run(LogShipper(log, state, denied, interval_s=1).flush())
    assert not state.exists()


def test_run_ships_on_the_interval_and_flushes_the_tail_on_stop(tmp_path: Path) -> None:
    log = tmp_path / "learner.log"
    clock = FakeClock()
    sink = MemorySink()
    records: list[bytes] = []

    async def scenario() -> None:
        shipper = LogShipper(log, tmp_path / "ship.json", sink, interval_s=5, clock=clock, on_lines=records.extend)
        stop = asyncio.Event()
        running = asyncio.create_task(shipper.run(stop))
        log.write_bytes(b"epoch 1\nepoch 2 (unterminated)")
        for _ in range(10_000):  # the fake clock runs as fast as the loop turns
            if sink.objects:
                break
            await asyncio.sleep(0.001)
        assert sink.assembled() == b"epoch 1\nepoch 2 (unterminated)"
        with log.open("ab") as handle:
            handle.write(b" end")
        stop.set()
        await asyncio.wait_for(running, 10)

    asyncio.run(scenario())
    assert sink.assembled() == b"epoch 1\nepoch 2 (unterminated) end"
    assert records == [b"epoch 1\n", b"epoch 2 (unterminated) end"]


def test_a_corrupt_state_file_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "ship.json"
    state.write_text("{not json")
    with pytest.raises(PermanentError, match=r"ship\.json"):
        LogShipper(tmp_path / "learner.log", state, MemorySink(), interval_s=1)


def test_structured_line() -> None:
    record = json.loads(structured_line("job-1", 2, b"loss \xff 0.5\r\n", ts=1_700_000_000.25))
    assert record == {
        "ts": "2023-11-14T22:13:20.250Z",
        "job_id": "job-1",
        "learner_id": 2,
        "source": "learner",
        "line": "loss \ufffd 0.5",
        "truncated": False,
    }
    assert json.loads(structured_line("job-1", 2, b"x" * 10))["truncated"] is True


def test_assemble_log_orders_by_number_and_refuses_gaps() -> None:
    parts = [("logs/learner.log.part-000002", b"b"), ("logs/learner.log.part-000001", b"a")]
    assert assemble_log(parts) == b"ab"
    assert assemble_log([(part_name(n), b"%d," % n) for n in range(12, 0, -1)]) == b"1,2,3,4,5,6,7,8,9,10,11,12,"
    with pytest.raises(ValueError, match=r"missing: learner\.log\.part-000002"):
        assemble_log([(part_name(1), b""), (part_name(3), b"")])
    with pytest.raises(ValueError, match="twice"):
        assemble_log([(part_name(1), b""), ("x/" + part_name(1), b"")])
    with pytest.raises(ValueError, match="not a log part"):
        assemble_log([("learner.log", b"")])


def test_throughput_helper(tmp_path: Path) -> None:
    assert measure_lines_per_second(tmp_path, lines=100_000) > 10_000


def test_lines_written_before_the_log_is_swapped_for_a_link_are_shipped(tmp_path: Path) -> None:
    """Issue 27 (flaky test_pair_boundary[log]): the product promise is that every byte the learner wrote to
    its log before swapping it for a link is shipped; then the shipper stops with UnsafeFileError."""
    logs = tmp_path / "logs"
    log = logs / "learner.log"
    (tmp_path / "environ").write_bytes(b"AWS_SECRET_ACCESS_KEY=sidecar-only")
    sink = MemorySink()
    shipper = LogShipper(log, tmp_path / "ship.json", sink, interval_s=3600, clock=FakeClock())
    shipper.hold()  # the sidecar, before control/start
    with log.open("ab") as learner:  # learner-run, then the command's swap at once
        learner.write(b"before\n")
        log.unlink()
        log.symlink_to(tmp_path / "environ")

    with pytest.raises(UnsafeFileError, match="symbolic link"):
        asyncio.run(asyncio.wait_for(shipper.run(asyncio.Event()), 10))
    assert sink.assembled() == b"before\n"
