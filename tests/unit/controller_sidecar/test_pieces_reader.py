"""PiecesReader: byte strings read as one seekable file, the way botocore reads a request body (hash, checksum,
send, and again after a rewind)."""

from __future__ import annotations

import hashlib
import io
import os

from hypothesis import given
from hypothesis import strategies as st

from controller_sidecar.s3store import PiecesReader


def read_all(reader: PiecesReader, size: int) -> bytes:
    return b"".join(bytes(chunk) for chunk in iter(lambda: reader.read(size), b""))


@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(min_value=1, max_value=50))
def test_sized_reads_give_the_pieces_joined_and_rewind(pieces: list[bytes], size: int) -> None:
    reader = PiecesReader(pieces)
    joined = b"".join(pieces)
    assert len(reader) == len(joined)
    assert read_all(reader, size) == joined
    assert reader.tell() == len(joined)
    assert reader.seek(0) == 0
    assert read_all(reader, size + 1) == joined


@given(st.lists(st.binary(max_size=40), max_size=8), st.integers(min_value=0, max_value=200))
def test_seek_then_read_the_rest_matches_a_bytes_file(pieces: list[bytes], offset: int) -> None:
    reader, expected = PiecesReader(pieces), io.BytesIO(b"".join(pieces))
    assert reader.seek(offset) == expected.seek(min(offset, len(expected.getvalue())))
    assert bytes(reader.read()) == expected.read()
    assert bytes(reader.read(10)) == b""


def test_a_sized_read_stops_at_the_end_of_a_piece_and_never_copies_it() -> None:
    first, second = os.urandom(1000), os.urandom(10)
    reader = PiecesReader([first, second])
    chunk = reader.read(4096)
    assert isinstance(chunk, memoryview)
    assert chunk.obj is first
    assert bytes(chunk) == first
    assert reader.seek(-5, os.SEEK_END) == 1005
    assert bytes(reader.read(4096)) == second[5:]
    reader.seek(0)
    assert hashlib.sha256(read_all(reader, 128)).digest() == hashlib.sha256(first + second).digest()
