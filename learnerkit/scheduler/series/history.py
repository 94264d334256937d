"""A learner's stored metric history as columns: one series per scalar name, each point its record's step, time
and value, sorted along both axes once so that any range is two binary searches away."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from controller_sidecar.metricrecords import RecordLines, parse_record

Axis = Literal["step", "time"]
AXES: tuple[Axis, ...] = ("step", "time")
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Column:
    """A series along one axis: its points that have that coordinate, sorted by it (stable: records of one step
    keep the order they were written in, an earlier attempt's before a later one's)."""

    x: Floats
    y: Floats


@dataclass(frozen=True)
class Series:
    name: str
    by_step: Column
    by_time: Column

    def along(self, axis: Axis) -> Column:
        return self.by_step if axis == "step" else self.by_time


@dataclass(frozen=True)
class History:
    series: dict[str, Series]

    @property
    def points(self) -> int:
        return sum(len(s.by_step.x) + len(s.by_time.x) for s in self.series.values())


def read_history(chunks: Iterable[bytes]) -> History:
    """The series of a stream of ``metrics.jsonl`` chunks. A value that is no finite number (a string, NaN, a
    boolean) is left out, as are bad lines (``metricrecords``)."""
    columns: dict[str, tuple[list[float], list[float], list[float]]] = {}
    nan = math.nan
    for line in _lines(chunks):
        record = parse_record(line)
        if record is None:
            continue
        step, moment = record.get("step"), record.get("time")
        x_step = float(step) if step is not None else nan
        x_time = float(moment) if moment is not None else nan
        for name, value in record["values"].items():
            if type(value) not in (int, float) or not math.isfinite(value):
                continue
            steps, times, values = columns.setdefault(name, ([], [], []))
            steps.append(x_step)
            times.append(x_time)
            values.append(float(value))
    return History({name: _series(name, *lists) for name, lists in sorted(columns.items())})


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    lines = RecordLines()
    for chunk in chunks:
        yield from lines.feed(chunk)
    yield from lines.flush()


def _series(name: str, steps: list[float], times: list[float], values: list[float]) -> Series:
    y = np.asarray(values, dtype=np.float64)
    by_step = _sorted(np.asarray(steps, dtype=np.float64), y)
    return Series(name, by_step, _sorted(np.asarray(times, dtype=np.float64), y))


def _sorted(x: Floats, y: Floats) -> Column:
    known = np.isfinite(x)
    x, y = x[known], y[known]
    if len(x) > 1 and np.any(x[1:] < x[:-1]):
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
    return Column(np.ascontiguousarray(x), np.ascontiguousarray(y))
