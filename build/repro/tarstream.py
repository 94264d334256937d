"""Tar archives as streams: a stream of chunks read as a file, and an archive written out block by block.

`docker save` and `docker load` speak tar over HTTP; an image of several GB passes through here without the
whole archive ever being held in memory or on disk (learnerkit_build.repro.reproducible).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Iterator

BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE


def chunk_file(chunks: Iterable[bytes]) -> io.BufferedReader:
    """A readable file over an iterator of byte chunks (an HTTP response body), for `tarfile` in stream mode."""
    return io.BufferedReader(_ChunkReader(chunks), RECORD)


class _ChunkReader(io.RawIOBase):
    def __init__(self, chunks: Iterable[bytes]) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


class TarWriter:
    """The blocks of a tar archive of regular files (mode 0644, owner 0, time 0): byte for byte what
    `tarfile.open(mode="w", format=tarfile.PAX_FORMAT)` writes for them, without holding the archive."""

    def __init__(self) -> None:
        self._offset = 0

    def member(self, name: str, size: int, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """One member: its header, its `size` bytes of data from `chunks`, the padding to a whole block."""
        info = tarfile.TarInfo(name)
        info.size = size
        info.mode = 0o644
        header = info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")
        yield header
        yield from chunks
        padding = -size % BLOCK
        if padding:
            yield bytes(padding)
        self._offset += len(header) + size + padding

    def end(self) -> bytes:
        """The two zero blocks that end the archive, and zeros to a whole record, as tarfile closes it."""
        end = 2 * BLOCK
        return bytes(end + -(self._offset + end) % RECORD)
