"""What the archive check reads of a model zip that passes by once, as a stream, on its way to the store.

A zip's directory is at its end, and the check (:func:`~learnerkit.scheduler.modelcode.archive.check_model_archive`)
reads only that directory and the one member ``requirements.txt``. So instead of a copy of the whole upload,
a :class:`ZipWindow` keeps the upload's last bytes (the directory must lie within them) and, from each local
header named ``requirements.txt``, the bytes that member can take up. It finds the local headers by following
them: each gives the size of the data after it, so only headers are read, not the data. Where a header does
not give that size (a zip written as a stream, with data descriptors) or the bytes are no local header (data
before the zip), it searches the bytes that follow for the name instead. :meth:`ZipWindow.reader`
shows them as a seekable file of the upload's full size; reading anything else is refused with a
:class:`~learnerkit.scheduler.errors.ModelCodeError`. Which local header is the member's is decided by the
directory at the end, as the sidecar's extraction decides it, not by where a name first appears.
"""

from __future__ import annotations

import os
from collections import deque

from controller_sidecar.requirements import REQUIREMENTS
from learnerkit.scheduler.errors import ModelCodeError
from learnerkit.scheduler.modelcode.archive import DEFAULT_MAX_DIRECTORY_BYTES, MAX_REQUIREMENTS_BYTES

SIGNATURE = b"PK\x03\x04"
"""A local file header's first bytes."""
DIRECTORY_SIGNATURES = (b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06")
"""What follows the last member: a directory entry, the end record, or the ZIP64 end record."""
DATA_DESCRIPTOR = 0x08
"""The flag of a member whose sizes follow its data instead of being in its header."""
ZIP64_EXTRA = 0x0001
UNKNOWN_SIZE = 0xFFFFFFFF
"""A size field that says: see the ZIP64 extra field."""
NAME = REQUIREMENTS.encode()
HEADER_BYTES = 30
"""A local header's fixed part: the name's length is at bytes 26-27, the name follows it."""
LOOKBACK = HEADER_BYTES + len(NAME) - 1
"""Bytes kept of what was fed before: a name that ends in the next chunk begins, with its header, within them."""
SPAN_BYTES = HEADER_BYTES + len(NAME) + 0xFFFF + MAX_REQUIREMENTS_BYTES + 4096
"""The header, the name, the longest extra field, and the member compressed (which adds a little at most)."""
MAX_SPANS = 16
"""Stretches kept at once: the name is rare by chance in compressed or random bytes, and the real one is kept."""


class ZipWindow:
    def __init__(self, max_directory_bytes: int = DEFAULT_MAX_DIRECTORY_BYTES) -> None:
        self.size = 0
        self.max_directory_bytes = max_directory_bytes
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._spans: dict[int, bytearray] = {}
        self._too_many_spans = False
        self._before = b""
        """The last bytes fed, up to ``LOOKBACK``."""
        self._header_at: int | None = 0
        """Where the next local header starts, while they are followed; None once they are not."""
        self._header = bytearray()
        """That header's bytes so far."""
        self._searching = False

    def feed(self, chunk: bytes) -> None:
        """The upload's next bytes (kept by reference, never copied, save the local headers and the stretches)."""
        start = self.size
        for span in self._spans.values():
            if len(span) < SPAN_BYTES:
                span += chunk[: SPAN_BYTES - len(span)]
        if self._header_at is not None:
            self._follow(chunk, start)
        elif self._searching:
            self._search(chunk, start, self._before)
        self.size += len(chunk)
        self._keep_tail(chunk)
        self._before = (self._before + chunk[-LOOKBACK:])[-LOOKBACK:]

    def _follow(self, chunk: bytes, start: int) -> None:
        """Read the local headers in ``chunk`` and skip the data between them."""
        while self._header_at is not None:
            index = self._header_at + len(self._header) - start
            complete = _header_size(self._header)
            if len(self._header) < complete:
                if index >= len(chunk):
                    return
                self._header += chunk[index : index + complete - len(self._header)]
                continue
            header, at = bytes(self._header), self._header_at
            self._header.clear()
            if header[:4] in DIRECTORY_SIGNATURES:
                self._header_at = None  # the members have ended: the rest is in the tail
                return
            data_size = _data_size(header)
            if data_size is None:  # no local header, or one that does not tell where its data ends
                self._header_at, self._searching = None, True
                self._search(header + chunk[index:], at, b"")  # no name of a later header begins before it
                return
            if _names_requirements(header):
                self._open(at, header + chunk[index : index + SPAN_BYTES - len(header)])
            self._header_at = at + len(header) + data_size

    def _search(self, chunk: bytes, start: int, before: bytes) -> None:
        """Find the name in ``chunk`` and across the seam with the ``before`` it: a search of a longer pattern than
        the header's signature, several times faster."""
        seam = before + chunk[: len(NAME) - 1]
        at = seam.find(NAME, max(len(before) - len(NAME) + 1, 0))
        if 0 <= at < len(before) and at >= HEADER_BYTES:  # a name across the chunks, its header before them
            header = at - HEADER_BYTES
            self._open(start - len(before) + header, before[header:] + chunk[: SPAN_BYTES - len(before) + header])
        at = chunk.find(NAME)
        while at >= 0:
            header = at - HEADER_BYTES
            if header >= 0:
                self._open(start + header, chunk[header : header + SPAN_BYTES])
            elif len(before) >= -header:
                self._open(start + header, before[header:] + chunk[: SPAN_BYTES + header])
            at = chunk.find(NAME, at + 1)

    def reader(self) -> KeptBytes:
        """The upload as a seekable file that answers only from what was kept."""
        return KeptBytes(self)

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end), from the tail or from one kept stretch."""
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        tail_start = self.size - self._tail_size
        if offset >= tail_start:
            return _slice(self._tail, offset - tail_start, end - tail_start)
        for begin, span in self._spans.items():
            if begin <= offset and end <= begin + len(span):
                return bytes(span[offset - begin : end - begin])
        kept = f"the last {self.max_directory_bytes} bytes of an upload"
        if self._too_many_spans:
            kept += f" (and the first {MAX_SPANS} places named {REQUIREMENTS})"
        raise ModelCodeError(
            f"model: the zip's check needs its bytes {offset}-{end - 1}, but the scheduler keeps only {kept}: "
            "the zip's directory is larger than that (too many members), or the zip is corrupt"
        )

    def _open(self, offset: int, first: bytes) -> None:
        """Keep the stretch from ``offset`` when a local header naming the member starts there."""
        if first[:4] != SIGNATURE or not _names_requirements(first):
            return
        if len(self._spans) >= MAX_SPANS:
            self._too_many_spans = True
            return
        self._spans[offset] = bytearray(first)

    def _keep_tail(self, chunk: bytes) -> None:
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        while self._tail_size - len(self._tail[0]) >= self.max_directory_bytes:
            self._tail_size -= len(self._tail.popleft())


def _header_size(header: bytearray) -> int:
    """How much to read of the local header that starts with ``header``: its signature, then its fixed part,
    then its name and extra field. Anything else ends at its signature."""
    if len(header) < len(SIGNATURE) or header[:4] != SIGNATURE:
        return len(SIGNATURE)
    if len(header) < HEADER_BYTES:
        return HEADER_BYTES
    return HEADER_BYTES + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")


def _names_requirements(header: bytes) -> bool:
    name_length = int.from_bytes(header[26:28], "little")
    return name_length == len(NAME) and header[HEADER_BYTES : HEADER_BYTES + len(NAME)] == NAME


def _data_size(header: bytes) -> int | None:
    """The size of the member's data after this local header; None when it is no local header or does not say."""
    if header[:4] != SIGNATURE or int.from_bytes(header[6:8], "little") & DATA_DESCRIPTOR:
        return None
    size = int.from_bytes(header[18:22], "little")
    if size != UNKNOWN_SIZE:
        return size
    extra = header[HEADER_BYTES + int.from_bytes(header[26:28], "little") :]
    while len(extra) >= 4:
        kind, length = int.from_bytes(extra[:2], "little"), int.from_bytes(extra[2:4], "little")
        if kind == ZIP64_EXTRA and length >= 16:  # a local header's ZIP64 field holds both sizes
            return int.from_bytes(extra[12:20], "little")
        extra = extra[4 + length :]
    return None


def _slice(chunks: deque[bytes], start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` of the chunks taken as one."""
    out = bytearray()
    position = 0
    for chunk in chunks:
        if position >= end:
            break
        following = position + len(chunk)
        if following > start:
            out += chunk[max(start - position, 0) : end - position]
        position = following
    return bytes(out)


class KeptBytes:
    """A read-only file over a window: what ``zipfile`` calls, answered from the window."""

    def __init__(self, window: ZipWindow) -> None:
        self._window = window
        self._position = 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._window.size}[whence]
        if base + offset < 0:
            raise OSError(f"seek to {base + offset}, before the start")
        self._position = base + offset
        return self._position

    def read(self, size: int = -1, /) -> bytes:
        length = self._window.size - self._position if size < 0 else size
        data = self._window.read(self._position, length)
        self._position += len(data)
        return data
