"""A learner's stored metric history as columns: one series per scalar name, each point its record's step, time
and value, sorted along both axes so that any range is two binary searches away.

A history mostly grows at its end while its learner runs: the sidecar stores each attempt's ``metrics.jsonl`` whole
again every 30 s (the learner's file, appended to, then the scalars the sidecar found itself,
``controller_sidecar.processing.stored_metrics``), and a later attempt's comes after an earlier one's. So a
:class:`HistoryReader` keeps the columns it parsed and the offset it stopped at, and the next read parses only the
bytes past it. It hashes the bytes it passes over: a history stored anew (shorter, or different up to that offset,
as when both the learner's lines and the sidecar's grew) raises `Rewritten` and is read again from the start, never
served stale. Lines are parsed with orjson (docs/dependencies.md), any line it refuses or that is no record again
with the sidecar's ``parse_record``, so both read the same records."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import orjson

from controller_sidecar.metricrecords import MAX_DEPTH, MAX_RECORD_BYTES, parse_record

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

    @property
    def nbytes(self) -> int:
        """The bytes of its columns."""
        return sum(c.x.nbytes + c.y.nbytes for s in self.series.values() for c in (s.by_step, s.by_time))


@dataclass(frozen=True)
class ReadMark:
    """Where a reader stopped: the bytes it parsed, their hash, and whether they end in a record without its
    newline."""

    offset: int
    digest: bytes
    open_line: bool


class Rewritten(Exception):
    """The stored history is no longer what was read of it: read it again from the start."""


_NO_BYTES = hashlib.blake2b().digest()


class HistoryReader:
    """A history read so far: its columns (``history``), the bytes they were parsed from (``offset``) and their
    hash. One `read` at a time (the cache holds a lock per history); a read that fails changes nothing."""

    def __init__(self, history: History | None = None, mark: ReadMark | None = None) -> None:
        """A reader that has read nothing, or (both given) one that goes on from a history read before and kept
        (`learnerkit.scheduler.series.stored`)."""
        self.history = history or History({})
        mark = mark or ReadMark(0, _NO_BYTES, False)
        self.offset = mark.offset
        self._digest = mark.digest
        self._open_line = mark.open_line
        """Whether the bytes read end in a whole record without its newline (a file's last line)."""

    @property
    def mark(self) -> ReadMark:
        return ReadMark(self.offset, self._digest, self._open_line)

    def read(self, chunks: Iterable[bytes]) -> History:
        """The history with what ``chunks`` (the whole stored history, from its first byte) holds past ``offset``
        parsed in; `Rewritten` when the bytes up to ``offset`` are not the ones read before. A last line without
        its newline is taken when it is a whole record, else left for the next read. A line longer than
        ``MAX_RECORD_BYTES`` is left out (``metricrecords``)."""
        seen, passed = hashlib.blake2b(), 0
        points = _Points()
        offset, pending, dropping = self.offset, b"", None
        check_open = self._open_line
        for chunk in chunks:
            if passed < self.offset:
                head = chunk[: self.offset - passed]
                seen.update(head)
                passed += len(head)
                chunk = chunk[len(head) :]
                if passed < self.offset:
                    continue
                if seen.digest() != self._digest:
                    raise Rewritten
            if not chunk:
                continue
            if check_open:
                if not chunk.startswith(b"\n"):
                    raise Rewritten  # the line taken as a whole record went on
                check_open = False
            if dropping is not None:
                end = chunk.find(b"\n")
                dropping.update(chunk if end < 0 else chunk[: end + 1])
                if end < 0:
                    continue
                seen, dropping, offset = dropping, None, offset + len(pending) + end + 1
                pending, chunk = b"", chunk[end + 1 :]
            data = pending + chunk
            cut = data.rfind(b"\n") + 1
            points.parse(data[:cut])
            seen.update(data[:cut])
            offset += cut
            pending = data[cut:]
            if len(pending) > MAX_RECORD_BYTES:
                dropping = seen.copy()
                dropping.update(pending)
        if passed < self.offset:
            raise Rewritten
        open_line = self._open_line and offset == self.offset
        if dropping is None and pending and points.parse(pending):
            seen.update(pending)
            offset += len(pending)
            open_line = True
        self.history = points.added_to(self.history)
        self.offset, self._digest, self._open_line = offset, seen.digest(), open_line
        return self.history


def read_history(chunks: Iterable[bytes]) -> History:
    """The series of a stream of ``metrics.jsonl`` chunks, read whole. A value that is no finite number (a string,
    NaN, a boolean) is left out, as are bad lines (``metricrecords``)."""
    return HistoryReader().read(chunks)


class _Points:
    """Points parsed from lines, by series name: steps, times and values, in the order they were written."""

    def __init__(self) -> None:
        self.columns: dict[str, tuple[list[float], list[float], list[float]]] = {}

    def parse(self, lines: bytes) -> bool:
        """Adds the records of ``lines``; whether the last line was one."""
        columns, nan, isfinite = self.columns, math.nan, math.isfinite
        parsed = _parsed(lines)
        valid = list(map(_is_record, parsed))
        # A record opens at least two objects: when the block's openings less two for every other record are
        # within MAX_DEPTH, no record nests deeper, and no line needs its own count.
        deep = lines.count(b"{") + lines.count(b"[") - 2 * max(0, sum(valid) - 1) > MAX_DEPTH
        record: Any = None
        for line, record, ok in zip(lines.split(b"\n"), parsed, valid, strict=False):
            if not ok or (deep and line.count(b"{") + line.count(b"[") > MAX_DEPTH):
                record = parse_record(line)  # json's reading: NaN, huge integers, deep nesting, bad lines
                if record is None:
                    continue
            step, moment = record.get("step"), record.get("time")
            x_step = float(step) if step is not None else nan
            x_time = float(moment) if moment is not None else nan
            for name, value in record["values"].items():
                if type(value) not in (int, float) or not isfinite(value):
                    continue
                found = columns.get(name)
                if found is None:
                    found = columns[name] = ([], [], [])
                found[0].append(x_step)
                found[1].append(x_time)
                found[2].append(float(value))
        return record is not None

    def added_to(self, history: History) -> History:
        if not self.columns:
            return history
        series = dict(history.series)
        for name, (steps, times, values) in self.columns.items():
            y = np.asarray(values, dtype=np.float64)
            old = series.get(name)
            by_step = _extended(old.by_step if old else None, np.asarray(steps, dtype=np.float64), y)
            by_time = _extended(old.by_time if old else None, np.asarray(times, dtype=np.float64), y)
            series[name] = Series(name, by_step, by_time)
        return History(dict(sorted(series.items())))


def _parsed(lines: bytes) -> list[Any]:
    """What orjson reads on each line of ``lines``, None where it reads nothing (an empty or too long line, or
    one it refuses). Line by line: one array of the joined lines would be faster, but a line cut mid-value
    could join its neighbours into records no line holds."""
    split = lines.split(b"\n")
    if lines.endswith(b"\n"):
        split.pop()
    return [_loads(line) for line in split]


def _loads(line: bytes) -> Any:
    if not line or len(line) > MAX_RECORD_BYTES:
        return None
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def _is_record(record: Any) -> bool:
    if type(record) is not dict or type(record.get("values")) is not dict:
        return False
    step, moment = record.get("step"), record.get("time")
    return (step is None or type(step) is int) and (moment is None or type(moment) in (int, float))


def _extended(column: Column | None, x: Floats, y: Floats) -> Column:
    """``column`` with the points of ``x`` and ``y`` that have this coordinate after its own, sorted (stably)."""
    known = np.isfinite(x)
    x, y = x[known], y[known]
    if column is not None and len(column.x):
        x, y = np.concatenate([column.x, x]), np.concatenate([column.y, y])
    if len(x) > 1 and np.any(x[1:] < x[:-1]):
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
    return Column(np.ascontiguousarray(x), np.ascontiguousarray(y))
