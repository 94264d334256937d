"""Archive safety: crafted zips and tars that try to escape, to link, to flood, or to lie about sizes."""

from __future__ import annotations

import io
import stat
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from controller_sidecar.archive import extract_archive
from controller_sidecar.errors import PermanentError, UnsafePathError

LIMITS = {"max_bytes": 1 << 20, "max_members": 100}


def make_zip(path: Path, members: dict[str, bytes], *, modes: dict[str, int] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if modes and name in modes:
                info.external_attr = modes[name] << 16
            zf.writestr(info, data)
    return path


def leftovers(parent: Path, dest: Path) -> list[str]:
    """Everything beside the archive except the archive itself: a refused archive must leave nothing."""
    return sorted(p.name for p in parent.iterdir() if p.suffix not in {".zip", ".tar", ".gz"} and p != dest)


def test_extracts_a_model_zip(tmp_path: Path) -> None:
    archive = make_zip(
        tmp_path / "model.zip",
        {"train.py": b"print('hi')\n", "pkg/": b"", "pkg/util.py": b"x = 1\n", "run.sh": b"#!/bin/sh\n"},
        modes={"run.sh": stat.S_IFREG | 0o755},
    )
    dest = tmp_path / "model"
    written = extract_archive(archive, dest, **LIMITS)
    assert written == len(b"print('hi')\n") + len(b"x = 1\n") + len(b"#!/bin/sh\n")
    assert (dest / "pkg" / "util.py").read_bytes() == b"x = 1\n"
    assert (dest / "run.sh").stat().st_mode & 0o111
    assert not (dest / "train.py").stat().st_mode & 0o111
    assert leftovers(tmp_path, dest) == []


def test_replaces_an_existing_destination_whole(tmp_path: Path) -> None:
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "stale.py").write_text("old")
    extract_archive(make_zip(tmp_path / "model.zip", {"new.py": b"new"}), dest, **LIMITS)
    assert sorted(p.name for p in dest.iterdir()) == ["new.py"]
    assert leftovers(tmp_path, dest) == []


@pytest.mark.parametrize(
    "name",
    ["../evil.py", "a/../../evil.py", "/etc/passwd", "a//b.py", "a/./b.py", "./../x.py", "a\\..\\b.py"],
)
def test_refuses_members_outside_dest(tmp_path: Path, name: str) -> None:
    archive = make_zip(tmp_path / "model.zip", {"ok.py": b"ok", name: b"evil"})
    dest = tmp_path / "model"
    with pytest.raises(UnsafePathError, match="member"):
        extract_archive(archive, dest, **LIMITS)
    assert not dest.exists()
    assert leftovers(tmp_path, dest) == []
    assert not (tmp_path / "evil.py").exists()


def test_refuses_a_symlink_member(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "model.zip", {"link": b"/etc/passwd"}, modes={"link": stat.S_IFLNK | 0o777})
    with pytest.raises(UnsafePathError, match="'link' is a link"):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []


def test_refuses_too_many_members(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "model.zip", {f"f{i}.py": b"" for i in range(11)})
    with pytest.raises(UnsafePathError, match="11 members"):
        extract_archive(archive, tmp_path / "model", max_bytes=1 << 20, max_members=10)


def test_refuses_a_bomb_by_its_expanded_size(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "model.zip", {"bomb.bin": bytes(4 << 20)})
    assert archive.stat().st_size < 64 * 1024
    with pytest.raises(UnsafePathError, match=r"'bomb\.bin'"):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []


def _lie_about_sizes(path: Path, declared: int) -> None:
    """Patch the uncompressed size in every local header and central directory entry to ``declared``."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = 0
        while (found := data.find(signature, start)) != -1:
            struct.pack_into("<I", data, found + offset, declared)
            start = found + 4
    path.write_bytes(bytes(data))


def test_refuses_a_bomb_that_lies_about_its_sizes(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "model.zip", {"a.bin": bytes(3 << 20), "b.bin": bytes(3 << 20)})
    _lie_about_sizes(archive, 10)
    assert all(info.file_size == 10 for info in zipfile.ZipFile(archive).infolist())
    with pytest.raises(UnsafePathError, match=r"'a\.bin' takes the expanded size above"):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []


def test_refuses_a_corrupt_archive(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "model.zip", {"a.py": b"a" * 1000})
    data = bytearray(archive.read_bytes())
    data[40] ^= 0xFF  # inside a.py's compressed data: the CRC no longer matches
    archive.write_bytes(bytes(data))
    with pytest.raises(PermanentError):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []


def test_refuses_what_is_not_an_archive(tmp_path: Path) -> None:
    archive = tmp_path / "model.zip"
    archive.write_bytes(b"not an archive")
    with pytest.raises(PermanentError, match="not a zip or tar"):
        extract_archive(archive, tmp_path / "model", **LIMITS)


def make_tar(path: Path, members: list[tarfile.TarInfo], contents: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for info in members:
            data = contents.get(info.name)
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def test_extracts_a_tar_gz(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "model.tar.gz", [tarfile.TarInfo("src/train.py")], {"src/train.py": b"go"})
    assert extract_archive(archive, tmp_path / "model", **LIMITS) == 2
    assert (tmp_path / "model" / "src" / "train.py").read_bytes() == b"go"


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE])
def test_refuses_tar_links_and_devices(tmp_path: Path, kind: bytes) -> None:
    member = tarfile.TarInfo("special")
    member.type = kind
    member.linkname = "/etc/passwd"
    archive = make_tar(tmp_path / "model.tar.gz", [member], {})
    with pytest.raises(UnsafePathError, match="'special' is a link or special file"):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []


def test_refuses_tar_member_outside_dest(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "model.tar.gz", [tarfile.TarInfo("../x.py")], {"../x.py": b"x"})
    with pytest.raises(UnsafePathError, match=r"member '\.\./x\.py'"):
        extract_archive(archive, tmp_path / "model", **LIMITS)


def test_extracts_a_tar_made_with_dot_prefixes(tmp_path: Path) -> None:
    root, folder, script = tarfile.TarInfo("."), tarfile.TarInfo("./src"), tarfile.TarInfo("./src/train.py")
    root.type = folder.type = tarfile.DIRTYPE
    archive = make_tar(tmp_path / "model.tar", [root, folder, script], {"./src/train.py": b"go"})
    assert extract_archive(archive, tmp_path / "model", **LIMITS) == 2
    assert (tmp_path / "model" / "src" / "train.py").read_bytes() == b"go"


def _encrypt_flag(path: Path) -> None:
    """Set the 'encrypted' bit of every member's general purpose flags (local header and central directory)."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (found := data.find(signature, start)) != -1:
            data[found + offset] |= 0x01
            start = found + 4
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("members", "named"),
    [
        ({"a": b"file", "a/b": b"below the file"}, "'a/b'"),
        ({"a/b": b"below a folder", "a": b"the folder as a file"}, "'a'"),
        ({"a/": b"", "a": b"a file over the folder"}, "'a'"),
    ],
)
def test_a_file_and_a_folder_of_one_name_name_the_member(tmp_path: Path, members: dict[str, bytes], named: str) -> None:
    archive = make_zip(tmp_path / "model.zip", members)
    with pytest.raises(UnsafePathError, match=f"member {named}: clashes with another member"):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []


def test_a_member_name_too_long_for_the_file_system_is_named(tmp_path: Path) -> None:
    name = "n" * 300 + ".py"
    archive = make_zip(tmp_path / "model.zip", {"ok.py": b"ok", name: b"x"})
    with pytest.raises(UnsafePathError, match="longer than 255 bytes") as caught:
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert name[:40] in str(caught.value)
    assert leftovers(tmp_path, tmp_path / "model") == []


def test_a_path_too_long_for_the_file_system_is_named(tmp_path: Path) -> None:
    name = "/".join(["d" * 250] * 20) + "/x.py"  # every segment fits, the whole path (5 KB) does not
    archive = make_zip(tmp_path / "model.zip", {name: b"x"})
    with pytest.raises(PermanentError, match=r"member 'd{250}/.*: cannot be written"):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []


def test_an_encrypted_member_is_named(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "model.zip", {"ok.py": b"ok", "secret.py": b"x" * 100})
    _encrypt_flag(archive)
    with pytest.raises(PermanentError, match=r"member 'ok\.py' cannot be read"):
        extract_archive(archive, tmp_path / "model", **LIMITS)
    assert leftovers(tmp_path, tmp_path / "model") == []
