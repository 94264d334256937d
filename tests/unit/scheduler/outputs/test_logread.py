"""Log reads by range: only the parts from the offset (or the last lines) on are fetched, and the bytes are right."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from controller_sidecar.errors import TransferError
from controller_sidecar.logship import part_name
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from learnerkit.scheduler.outputs.logs import list_log

PREFIX = "job-1/attempt-1/learner-1/logs/"
LOCATION = S3Location("results", f"{PREFIX}learner.log.part-")


class FakeStore:
    """Parts in memory; records every ranged read (key, first, last) and serves it in small chunks."""

    def __init__(self, parts: list[bytes], *, listed_in: list[int] | None = None) -> None:
        self.objects = {f"{PREFIX}{part_name(n)}": data for n, data in enumerate(parts, start=1)}
        self.order = listed_in
        self.reads: list[tuple[str, int, int]] = []

    def list(self, location: S3Location) -> list[RemoteObject]:
        assert location == LOCATION
        keys = sorted(self.objects)
        if self.order is not None:
            keys = [keys[i] for i in self.order]
        return [RemoteObject(k, len(v), hashlib.md5(v).hexdigest()) for k, v in ((k, self.objects[k]) for k in keys)]

    def read_range(self, bucket: str, key: str, first: int, last: int) -> Iterator[bytes]:
        assert bucket == "results" and 0 <= first <= last < len(self.objects[key])
        self.reads.append((key.rsplit("-", 1)[1], first, last))
        data = self.objects[key][first : last + 1]
        return iter([data[i : i + 5] for i in range(0, len(data), 5)])


PARTS = [b"one\ntwo\n", b"three\nfo", b"ur\nfive\nsix\n", b"seven"]
LOG = b"".join(PARTS)


def test_an_offset_in_the_middle_of_a_part_fetches_from_there_on_only() -> None:
    store = FakeStore(PARTS, listed_in=[3, 1, 0, 2])
    log = list_log(store, LOCATION)
    assert log.size == len(LOG)
    offset = len(PARTS[0]) + 3  # inside part 2
    assert b"".join(log.chunks(offset)) == LOG[offset:]
    assert store.reads == [("000002", 3, 7), ("000003", 0, 11), ("000004", 0, 4)]


def test_a_range_with_an_end_reads_no_further() -> None:
    store = FakeStore(PARTS)
    log = list_log(store, LOCATION)
    assert b"".join(log.chunks(2, 10)) == LOG[2:10]
    assert [key for key, _, _ in store.reads] == ["000001", "000002"]


@pytest.mark.parametrize("lines", [0, 1, 2, 3, 4, 5, 7, 8, 20])
def test_the_last_lines_read_back_from_the_end_only_as_far_as_needed(lines: int) -> None:
    store = FakeStore(PARTS)
    log = list_log(store, LOCATION)
    start = log.tail_start(lines)
    expected = b"".join(LOG.splitlines(keepends=True)[-lines:]) if lines else b""
    assert LOG[start:] == expected
    scanned = [key for key, _, _ in store.reads]
    assert scanned == sorted(scanned, reverse=True)
    # the line end before "five" is in part 3, the one before "four" in part 2
    assert scanned == {0: [], 1: ["000004", "000003"], 3: ["000004", "000003"], 4: ["000004", "000003", "000002"]}.get(
        lines, scanned
    )


def test_a_final_newline_ends_the_last_line() -> None:
    store = FakeStore([b"a\nb\n", b"c\n"])
    log = list_log(store, LOCATION)
    assert log.tail_start(1) == 4 and log.tail_start(2) == 2 and log.tail_start(3) == 0
    assert store.reads[0][0] == "000002"


def test_a_missing_part_is_refused() -> None:
    store = FakeStore(PARTS)
    del store.objects[f"{PREFIX}{part_name(2)}"]
    with pytest.raises(ValueError, match="missing"):
        list_log(store, LOCATION)


def test_a_part_read_whole_is_checked_against_its_listed_etag() -> None:
    store = FakeStore(PARTS)
    log = list_log(store, LOCATION)
    store.objects[f"{PREFIX}{part_name(1)}"] = b"one\nTWO\n"
    with pytest.raises(TransferError, match="ETag"):
        b"".join(log.chunks(0))


def test_the_last_lines_read_back_no_further_than_the_byte_cap() -> None:
    """A log of one endless line: `--tail 1` reads back only the cap, and starts there."""
    parts = [b"x" * 40, b"y" * 40, b"z" * 40]
    store = FakeStore(parts)
    log = list_log(store, LOCATION)
    assert log.tail_start(1, max_bytes=50) == 120 - 50
    assert sum(last - first + 1 for _, first, last in store.reads) == 50
    assert store.reads == [("000003", 0, 39), ("000002", 30, 39)]


def test_lines_within_the_cap_are_found_as_before() -> None:
    store = FakeStore([b"a\nb\n", b"c\n"])
    log = list_log(store, LOCATION)
    assert log.tail_start(2, max_bytes=4) == 2 and log.tail_start(3, max_bytes=4) == 2
