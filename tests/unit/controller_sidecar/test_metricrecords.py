"""metrics.jsonl lines are bounded in length and depth: a bad line is skipped and counted (issue 27 D8)."""

from __future__ import annotations

import json

import pytest

from controller_sidecar.evalmetrics import MetricsParser
from controller_sidecar.metricrecords import MAX_DEPTH, MAX_RECORD_BYTES, RecordLines, parse_record, serve_records

DEEP = b'{"step": 1, "values": {"loss": 0.5}, "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
GOOD = b'{"step": 2, "time": 5.0, "values": {"loss": 0.25}}\n'


def test_a_deeply_nested_line_is_skipped_and_counted_and_the_next_line_is_read() -> None:
    parser = MetricsParser(None)
    assert parser.feed_jsonl_line(DEEP) == []
    assert parser.malformed == 1
    assert [u.value for u in parser.feed_jsonl_line(GOOD)] == [0.25]
    assert parser.latest() == {"loss": 0.25}


@pytest.mark.parametrize(
    "line",
    [
        DEEP,
        b'{"values": {"a": ' + b"[" * (MAX_DEPTH) + b"]" * MAX_DEPTH + b"}}",
        b'{"values": {"a": 1}, "pad": "' + b"x" * MAX_RECORD_BYTES + b'"}',
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"values": 3}',
        b'{"values": {}, "step": "4"}',
        b'{"values": {}, "time": true}',
    ],
)
def test_bad_lines_are_not_records(line: bytes) -> None:
    assert parse_record(line) is None


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    line = json.dumps({"values": {"loss": 1.0}, "note": '[[[[[[[[[[[[{{{{{{{{{{\\"[[[['}).encode()
    assert parse_record(line) == json.loads(line)


def test_an_over_long_line_is_dropped_whole_however_it_is_cut() -> None:
    lines = RecordLines(max_bytes=10)
    out = lines.feed(b"ok\n" + b"x" * 7) + lines.feed(b"y" * 7 + b'{"a"') + lines.feed(b"\nfine\nend")
    assert out + lines.flush() == [b"ok\n", b"fine\n", b"end"]
    assert lines.too_long == 1


def test_the_served_history_holds_only_records() -> None:
    chunks = [GOOD[:10], GOOD[10:] + DEEP[:1000], DEEP[1000:], b"garbage\n", GOOD]
    served = b"".join(serve_records(chunks)).splitlines()
    assert [json.loads(line) for line in served] == [json.loads(GOOD)] * 2
