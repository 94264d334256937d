"""Reading a learner's shipped log from the object store by range, with bounded memory.

The sidecar ships the log as numbered parts (``logs/learner.log.part-NNNNNN``, :mod:`controller_sidecar.logship`);
concatenated in number order they are the log. One listing gives every part's size, so where each part
starts in the log is known before anything is downloaded: a read from an offset fetches only the parts
from there on (the first one from the middle, with a ``Range`` request), and the last N lines are found by
scanning parts backwards from the end. Bytes are handed on in chunks of at most 1 MiB as they arrive.

A part is read only up to the size the listing gave: a sidecar that restarts may ship its last part again,
grown, but the grown part starts with the same bytes, so what is read agrees with the listing (and with the
offsets the client was given before).
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from controller_sidecar.errors import TransferError
from controller_sidecar.logship import part_name, part_number
from controller_sidecar.retry import HOST_CALLS, retry_sync
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location

_PLAIN_ETAG = re.compile(r"^[0-9a-f]{32}$")


class RangeStore(Protocol):
    """What of :class:`~controller_sidecar.s3store.S3Store` a log read uses."""

    def list(self, location: S3Location) -> list[RemoteObject]: ...
    def read_range(self, bucket: str, key: str, first: int, last: int) -> Iterator[bytes]: ...


TAIL_MAX_BYTES = 8 * 2**20
"""How far back from a log's end `--tail N` reads, whatever N: a log of few, long lines costs no more."""


@dataclass(frozen=True)
class LogPart:
    key: str
    start: int
    """Where the part starts in the log."""
    size: int
    etag: str

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class ShippedLog:
    """A listed log: its parts in order, and the store and bucket to read them from."""

    store: RangeStore
    bucket: str
    parts: tuple[LogPart, ...]

    @property
    def size(self) -> int:
        return self.parts[-1].end if self.parts else 0

    def chunks(self, start: int, end: int | None = None) -> Iterator[bytes]:
        """Bytes ``start..end`` (exclusive; default: the log's end), fetching only the parts they lie in."""
        end = self.size if end is None else min(end, self.size)
        for part in self.parts:
            if part.end <= start or part.start >= end or part.size == 0:
                continue
            first, last = max(start, part.start) - part.start, min(end, part.end) - part.start - 1
            yield from self._part(part, first, last)

    def tail_start(self, lines: int, *, max_bytes: int = TAIL_MAX_BYTES) -> int:
        """Where the last ``lines`` lines start (a last line without its newline counts as one); reads parts
        from the end only until that many line ends are found, and never more than ``max_bytes`` back: a log
        of few, long lines then starts ``max_bytes`` before its end."""
        if lines <= 0:
            return self.size
        wanted = lines
        floor = max(self.size - max_bytes, 0)
        final = self.size - 1  # a newline that ends the log ends the last line: it does not start one
        for part in reversed(self.parts):
            if part.end <= floor:
                break
            if part.size == 0:
                continue
            first = max(floor, part.start) - part.start
            found: deque[int] = deque(maxlen=wanted)
            count, position = 0, part.start + first
            for chunk in self._part(part, first, part.size - 1):
                at = chunk.find(b"\n")
                while at >= 0:
                    if position + at != final:
                        found.append(position + at)
                        count += 1
                    at = chunk.find(b"\n", at + 1)
                position += len(chunk)
            if count >= wanted:
                return found[0] + 1
            wanted -= count
        return floor

    def _part(self, part: LogPart, first: int, last: int) -> Iterator[bytes]:
        """A part's bytes ``first..last``; a part read whole is checked against its listed ETag (plain MD5)."""
        opened = retry_sync(
            partial(self.store.read_range, self.bucket, part.key, first, last), HOST_CALLS, what=part.key
        )
        whole = first == 0 and last == part.size - 1 and _PLAIN_ETAG.match(part.etag) is not None
        digest = hashlib.md5(usedforsecurity=False) if whole else None
        for chunk in opened:
            if digest is not None:
                digest.update(chunk)
            yield chunk
        if digest is not None and digest.hexdigest() != part.etag:
            raise TransferError(f"s3://{self.bucket}/{part.key}: content does not match its ETag {part.etag}")


def list_log(store: RangeStore, location: S3Location) -> ShippedLog:
    """The log's parts under ``location`` (``.../logs/learner.log.part-``), in order, each with its offset.

    Raises ValueError when a part is missing or a name is not a part's.
    """
    listed = retry_sync(lambda: store.list(location), HOST_CALLS, what=f"list {location}")
    numbered: dict[int, RemoteObject] = {}
    for listed_obj in listed:
        number = part_number(listed_obj.key)
        if number in numbered:
            raise ValueError(f"log part {number} is listed twice ({listed_obj.key!r})")
        numbered[number] = listed_obj
    parts: list[LogPart] = []
    start = 0
    for number in range(1, len(numbered) + 1):
        obj = numbered.get(number)
        if obj is None:
            raise ValueError(f"log parts are missing under {location}: {part_name(number)}")
        parts.append(LogPart(obj.key, start, obj.size, obj.etag))
        start += obj.size
    return ShippedLog(store, location.bucket, tuple(parts))
