"""A history read on: appended bytes are parsed alone, a rewrite is caught, a partial last line waits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from learnerkit.scheduler.series.history import HistoryReader, Rewritten, read_history


def _records(steps: range, loss: float = 1.0) -> bytes:
    return b"".join(json.dumps({"step": s, "values": {"loss": loss + s}}).encode() + b"\n" for s in steps)


def _chunked(data: bytes, size: int = 7) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_an_appended_history_is_read_on_and_equals_one_read_whole() -> None:
    first, more = _records(range(50)), _records(range(50, 80))
    reader = HistoryReader()
    reader.read(_chunked(first))
    assert reader.offset == len(first)
    grown = reader.read(_chunked(first + more, 11))
    whole = read_history([first + more]).series["loss"].by_step
    assert np.array_equal(grown.series["loss"].by_step.x, whole.x)
    assert np.array_equal(grown.series["loss"].by_step.y, whole.y)
    assert reader.offset == len(first + more)


@pytest.mark.parametrize("stored_anew", [_records(range(10)), _records(range(50), loss=2.0) + _records(range(3))])
def test_a_history_stored_anew_shorter_or_changed_is_refused_and_nothing_changes(stored_anew: bytes) -> None:
    reader = HistoryReader()
    before = reader.read([_records(range(50))])
    with pytest.raises(Rewritten):
        reader.read(_chunked(stored_anew))
    assert reader.history is before and reader.offset == len(_records(range(50)))
    again = HistoryReader().read([stored_anew])
    assert again.series["loss"].by_step.y[0] == (2.0 if len(stored_anew) > reader.offset else 1.0)


def test_a_partial_last_line_is_left_for_the_next_read() -> None:
    data = _records(range(5))
    partial = b'{"step": 5, "values": {"lo'
    reader = HistoryReader()
    assert len(reader.read([data + partial]).series["loss"].by_step.x) == 5
    assert reader.offset == len(data)
    done = reader.read([data + partial + b'ss": 9.5}}\n'])
    assert done.series["loss"].by_step.y[-1] == 9.5 and len(done.series["loss"].by_step.x) == 6


def test_a_whole_last_record_without_its_newline_is_taken_and_a_line_that_goes_on_is_a_rewrite() -> None:
    data = _records(range(3)) + b'{"step": 3, "values": {"loss": 7}}'
    reader = HistoryReader()
    assert reader.read([data]).series["loss"].by_step.y[-1] == 7.0
    assert reader.read([data + b"\n" + _records(range(4, 6))]).series["loss"].by_step.x.tolist() == [0, 1, 2, 3, 4, 5]
    other = HistoryReader()
    other.read([data])
    with pytest.raises(Rewritten):
        other.read([data + b' , "x": 1}\n'])


def test_lines_orjson_refuses_are_read_as_the_sidecar_reads_them() -> None:
    data = b"\n".join(
        [
            b'{"step": 1, "time": NaN, "values": {"loss": 1.5}}',  # json reads NaN; orjson refuses it
            b'{"step": 2, "values": {"loss": 2.5, "deep": [[[[[[[[[1]]]]]]]]]}}',  # too deep: a bad line
            b"not json",
            b'{"step": 3, "values": {"loss": 3.5}}',
        ]
    )
    loss = read_history([data + b"\n"]).series["loss"]
    assert loss.by_step.x.tolist() == [1, 3] and loss.by_step.y.tolist() == [1.5, 3.5]
    assert len(loss.by_time.x) == 0
