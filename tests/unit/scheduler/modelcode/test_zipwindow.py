"""The archive check of a model that passes by as a stream: what the window keeps gives the check of the whole
file, whatever the chunks, and what it did not keep is refused, never guessed."""

from __future__ import annotations

import io
import os
import re
import zipfile
from pathlib import Path

import pytest

from learnerkit.scheduler.errors import ModelCodeError
from learnerkit.scheduler.modelcode.archive import ModelSummary, check_model_archive
from learnerkit.scheduler.modelcode.zipwindow import MAX_SPANS, ZipWindow

REQUIREMENTS_TEXT = b"lkgreet==1.0\n# a comment\nlkother>=2\n"


def _zip(members: list[tuple[str, bytes]], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return out.getvalue()


def _streamed(data: bytes, chunk: int, max_directory_bytes: int = 4096) -> ModelSummary:
    window = ZipWindow(max_directory_bytes)
    for start in range(0, len(data), chunk):
        window.feed(data[start : start + chunk])
    assert window.size == len(data)
    return check_model_archive(window.reader(), name="model", max_directory_bytes=max_directory_bytes)


def _local_header(name: bytes, data: bytes) -> bytes:
    """A stored member's local header and data, as a zip writer lays them out (CRC and times left zero)."""
    fields = (20, 0, 0, 0, 0, 0, len(data), len(data), len(name), 0)
    sizes = (2, 2, 2, 2, 2, 4, 4, 4, 2, 2)
    return b"PK\x03\x04" + b"".join(v.to_bytes(n, "little") for v, n in zip(fields, sizes, strict=True)) + name + data


@pytest.mark.parametrize("chunk", [1, 3, 5, 4093, 65536, 1 << 20])
def test_a_streamed_zip_is_checked_as_its_file_whatever_the_chunks(tmp_path: Path, chunk: int) -> None:
    """requirements.txt comes first, far before the kept end: its stretch is kept as it passes."""
    data = _zip(
        [("requirements.txt", REQUIREMENTS_TEXT), ("train.py", b"print(1)\n"), ("weights.bin", os.urandom(300_000))]
    )
    (tmp_path / "model.zip").write_bytes(data)
    expected = check_model_archive(tmp_path / "model.zip")
    assert expected.requirements == ("lkgreet==1.0", "lkother>=2")
    assert _streamed(data, chunk) == expected


def test_a_stored_requirements_file_and_one_at_the_end_are_read_too() -> None:
    stored = _zip([("requirements.txt", REQUIREMENTS_TEXT), ("w.bin", os.urandom(50_000))], zipfile.ZIP_STORED)
    assert _streamed(stored, 7).requirements == ("lkgreet==1.0", "lkother>=2")
    last = _zip([("w.bin", os.urandom(50_000)), ("requirements.txt", REQUIREMENTS_TEXT)])
    assert _streamed(last, 1000).requirements == ("lkgreet==1.0", "lkother>=2")


def test_the_directory_decides_which_header_is_the_requirements_file() -> None:
    """A member's bytes that look like a local header named requirements.txt are not the member: the check reads
    the one the directory points at, whichever comes first, and a bad one is refused wherever it hides."""
    decoy = _local_header(b"requirements.txt", b"git+https://example.invalid/evil.git\n")
    good_real = _zip([("blob.bin", decoy + os.urandom(20_000)), ("requirements.txt", REQUIREMENTS_TEXT)])
    assert _streamed(good_real, 333).requirements == ("lkgreet==1.0", "lkother>=2")

    bad_real = _zip(
        [
            ("requirements.txt", b"git+https://example.invalid/evil.git\n"),
            ("blob.bin", _local_header(b"requirements.txt", REQUIREMENTS_TEXT) + os.urandom(20_000)),
        ],
        zipfile.ZIP_STORED,
    )
    with pytest.raises(ModelCodeError, match=r"model: requirements\.txt line 1: .* URLs are not allowed"):
        _streamed(bad_real, 333)


def test_a_directory_larger_than_the_kept_end_is_refused_as_validate_refuses_it(tmp_path: Path) -> None:
    data = _zip([(f"pkg/module_with_a_long_name_{i:04d}.py", b"") for i in range(200)])
    with pytest.raises(ModelCodeError, match=r"last 4096 bytes of an upload: the zip's directory is larger"):
        _streamed(data, 1000)
    (tmp_path / "many.zip").write_bytes(data)
    with pytest.raises(ModelCodeError, match=r"many.zip: its directory .* over the limit of 4096"):
        check_model_archive(tmp_path / "many.zip", max_directory_bytes=4096)


def test_lookalike_headers_inside_a_members_data_are_skipped_however_many() -> None:
    """The local headers are followed from one to the next: bytes inside a member are never taken for one."""
    decoys = b"".join(_local_header(b"requirements.txt", b"x" * 3000) for _ in range(3 * MAX_SPANS))
    members = [("blob.bin", decoys + os.urandom(200_000)), ("requirements.txt", REQUIREMENTS_TEXT)]
    data = _zip([*members, ("w.bin", os.urandom(20_000))], zipfile.ZIP_STORED)
    assert _streamed(data, 4096).requirements == ("lkgreet==1.0", "lkother>=2")


def _unfollowable(tmp_path: Path, members: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """The same members as a zip behind a stub (a self-extracting archive) and as one written to a pipe (each
    member's sizes in a data descriptor after its data): their headers cannot be followed."""
    stub = b"#!/bin/sh\nexit 0\n" + _zip(members, zipfile.ZIP_STORED)

    class Pipe(io.RawIOBase):
        def __init__(self) -> None:
            self.data = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b: bytes) -> int:  # type: ignore[override]
            self.data += b
            return len(b)

    pipe = Pipe()
    with zipfile.ZipFile(pipe, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, content in members:
            zf.writestr(name, content)
    return {"stub": stub, "streamed": bytes(pipe.data)}


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_zips_whose_headers_cannot_be_followed_are_searched(tmp_path: Path, chunk: int) -> None:
    members = [("w0.bin", os.urandom(40_000)), ("requirements.txt", REQUIREMENTS_TEXT), ("w.bin", os.urandom(9000))]
    for kind, data in _unfollowable(tmp_path, members).items():
        (tmp_path / f"{kind}.zip").write_bytes(data)
        assert _streamed(data, chunk) == check_model_archive(tmp_path / f"{kind}.zip"), kind


def test_a_zip64_header_is_followed_past() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        with zf.open("weights.bin", "w", force_zip64=True) as member:
            member.write(os.urandom(30_000))
        zf.writestr("requirements.txt", REQUIREMENTS_TEXT)
        zf.writestr("w.bin", os.urandom(9000))
    assert _streamed(out.getvalue(), 4096).requirements == ("lkgreet==1.0", "lkother>=2")


def test_too_many_lookalike_headers_are_named_when_the_real_one_was_not_kept(tmp_path: Path) -> None:
    """Searched (behind a stub), the lookalikes come one or two a chunk, and the stretch of each reaches 130 kB
    on: the real member lies further on than that."""
    decoys = b"".join(_local_header(b"requirements.txt", b"x" * 3000) for _ in range(MAX_SPANS + 1))
    members = [("blob.bin", decoys + os.urandom(200_000)), ("requirements.txt", REQUIREMENTS_TEXT)]
    data = _unfollowable(tmp_path, [*members, ("w.bin", os.urandom(20_000))])["stub"]
    with pytest.raises(ModelCodeError, match=re.escape(f"(and the first {MAX_SPANS} places named requirements.txt)")):
        _streamed(data, 4096)


def test_bytes_that_are_no_zip_are_refused_as_such() -> None:
    window = ZipWindow()
    window.feed(os.urandom(10_000))
    with pytest.raises(ModelCodeError, match="model: not a zip archive"):
        check_model_archive(window.reader(), name="model")


def test_the_window_holds_the_end_and_the_stretches_only() -> None:
    """What the window holds stays bounded however long the upload: its end, and no stretch of other names."""
    window = ZipWindow(1 << 20)
    for _ in range(64):
        window.feed(os.urandom(256_000) + _local_header(b"train.py", b"x"))
    assert window.size == 64 * (256_000 + len(_local_header(b"train.py", b"x")))
    with pytest.raises(ModelCodeError, match="keeps only the last 1048576 bytes"):
        window.read(0, 10)
    assert len(window.read(window.size - (1 << 20), 1 << 20)) == 1 << 20
