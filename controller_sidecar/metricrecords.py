"""Records of ``metrics.jsonl`` read safely: the learner writes that file, so a line may be anything.

A line is a record when it is at most :data:`MAX_RECORD_BYTES` long, nests at most :data:`MAX_DEPTH`
arrays or objects (checked before it is parsed: a deeply nested line would make ``json`` raise
RecursionError), and is a JSON object whose ``values`` is an object, ``step`` an integer or absent and
``time`` a number or absent. Anything else is a bad line: skipped and counted, never an error. The sidecar
(following the file) and the scheduler's API (serving the stored history) read it the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

MAX_RECORD_BYTES = 64 << 10
MAX_DEPTH = 8
_OPENING = frozenset(b"[{")
_CLOSING = frozenset(b"]}")
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def parse_record(line: bytes) -> dict[str, Any] | None:
    """The record on ``line`` (its newline optional), or None for a bad line."""
    if len(line) > MAX_RECORD_BYTES + 1 or not _depth_within(line, MAX_DEPTH):
        return None
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return None
    if not isinstance(record, dict) or not isinstance(record.get("values"), dict):
        return None
    step, moment = record.get("step"), record.get("time")
    if not (step is None or _is_int(step)) or not (moment is None or _is_number(moment)):
        return None
    return record


class RecordLines:
    """Cuts a byte stream into lines of at most :data:`MAX_RECORD_BYTES`: a longer line is dropped whole
    (it is counted in ``too_long``), so no piece of it is ever read as a line of its own."""

    def __init__(self, max_bytes: int = MAX_RECORD_BYTES) -> None:
        self.max_bytes = max_bytes
        self.too_long = 0
        self._tail = b""
        self._dropping = False

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines ``data`` finishes, each with its ``\\n``."""
        parts = (self._tail + data).split(b"\n")
        self._tail = parts.pop()
        lines: list[bytes] = []
        for part in parts:
            if self._dropping or len(part) > self.max_bytes:
                self.too_long += 1
                self._dropping = False
            else:
                lines.append(part + b"\n")
        if len(self._tail) > self.max_bytes:
            self._tail, self._dropping = b"", True
        return lines

    def flush(self) -> list[bytes]:
        """The unterminated rest (at the end of the stream), unless it was too long."""
        tail, self._tail = self._tail, b""
        if self._dropping:
            self._dropping = False
            self.too_long += 1
            return []
        return [tail] if tail else []


def serve_records(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The records of a stream of ``metrics.jsonl`` chunks, one JSON line each; bad lines left out."""
    lines = RecordLines()
    for chunk in chunks:
        for line in lines.feed(chunk):
            if (record := parse_record(line)) is not None:
                yield json.dumps(record).encode() + b"\n"
    for line in lines.flush():
        if (record := parse_record(line)) is not None:
            yield json.dumps(record).encode() + b"\n"


def _depth_within(line: bytes, limit: int) -> bool:
    """Whether no array or object on ``line`` nests deeper than ``limit`` (brackets in strings do not count)."""
    if sum(line.count(bracket) for bracket in (b"[", b"{")) <= limit:
        return True
    depth, in_string, escaped = 0, False, False
    for byte in line:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte in _OPENING:
            depth += 1
            if depth > limit:
                return False
        elif byte in _CLOSING:
            depth -= 1
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
