"""The stored history as columns: what counts as a point, and the order along either axis."""

from __future__ import annotations

import json

import numpy as np
import pytest

from learnerkit.scheduler.errors import InvalidRequestError
from learnerkit.scheduler.series.history import read_history
from learnerkit.scheduler.series.window import MAX_POINTS, window


def _lines(*records: object) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _chunked(data: bytes, size: int = 7) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_each_scalar_is_a_series_and_what_is_no_finite_number_is_left_out() -> None:
    data = _lines(
        {"step": 1, "time": 10.0, "values": {"loss": 0.5, "acc": 0.1, "note": "hi", "flag": True}},
        {"step": 2, "time": 11.0, "values": {"loss": 0.25}},
        {"step": 3, "values": {"loss": 1e400}},  # json reads it as inf
        {"time": 12.5, "values": {"acc": 0.3}},
    )
    data += b"not json\n" + b'{"values": [1]}\n' + b'{"step": "x", "values": {"loss": 1}}\n'
    history = read_history(_chunked(data))
    assert list(history.series) == ["acc", "loss"]
    loss, acc = history.series["loss"], history.series["acc"]
    assert loss.by_step.x.tolist() == [1.0, 2.0] and loss.by_step.y.tolist() == [0.5, 0.25]
    assert acc.by_step.x.tolist() == [1.0], "a record without a step is on the time axis only"
    assert acc.by_time.x.tolist() == [10.0, 12.5] and acc.by_time.y.tolist() == [0.1, 0.3]


def test_a_later_attempt_that_goes_back_in_steps_is_sorted_in_stably() -> None:
    first = [{"step": s, "time": 100.0 + s, "values": {"loss": 1.0}} for s in range(1, 6)]
    second = [{"step": s, "time": 200.0 + s, "values": {"loss": 2.0}} for s in range(4, 8)]
    series = read_history([_lines(*first), _lines(*second)]).series["loss"]
    assert series.by_step.x.tolist() == [1, 2, 3, 4, 4, 5, 5, 6, 7]
    assert series.by_step.y.tolist() == [1, 1, 1, 1, 2, 1, 2, 2, 2], "attempt 1's point of a step before attempt 2's"
    assert np.all(np.diff(series.by_time.x) > 0)


def _series(n: int) -> object:
    return read_history([_lines(*({"step": s, "time": 1e9 + s, "values": {"v": float(s % 97)}} for s in range(n)))])


def test_a_window_is_the_range_thinned_and_a_narrow_one_is_whole() -> None:
    series = _series(20_000).series["v"]  # type: ignore[attr-defined]
    whole = window(series, "step", start=None, end=None, points=1000)
    assert (whole.total, whole.in_range, whole.first, whole.last) == (20_000, 20_000, 0.0, 19_999.0)
    assert len(whole.x) <= 1000 and whole.x[0] == 0 and whole.x[-1] == 19_999
    zoomed = window(series, "step", start=1000, end=1500, points=1000)
    assert zoomed.in_range == 501 and zoomed.x == [float(s) for s in range(1000, 1501)], "full resolution, ends in"
    assert zoomed.y == [float(s % 97) for s in range(1000, 1501)]
    by_time = window(series, "time", start=1e9 + 10, end=None, points=5000)
    assert by_time.in_range == 19_990 and by_time.x[0] == 1e9 + 10
    assert window(series, "step", start=50_000, end=None, points=100).x == []


@pytest.mark.parametrize(
    ("start", "end", "points", "words"),
    [
        (10.0, 5.0, 100, "from: must not be after to; got from=10, to=5"),
        (float("nan"), None, 100, "from: a finite number"),
        (None, float("inf"), 100, "to: a finite number"),
        (None, None, 9, "points: from 10 to"),
        (None, None, MAX_POINTS + 1, f"points: from 10 to {MAX_POINTS}"),
    ],
)
def test_a_bad_range_is_refused_naming_the_parameter(
    start: float | None, end: float | None, points: int, words: str
) -> None:
    series = _series(10).series["v"]  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequestError, match=words.replace("(", r"\(")):
        window(series, "step", start=start, end=end, points=points)
