"""What differs between two image archives: the listing names the layer, the file and what differs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from learnerkit_build.repro.imagediff import member_difference
from learnerkit_build.repro.reproducible import layer_archive

EPOCH = 1767225600


def rootfs_tar(path: Path, files: dict[str, tuple[bytes, int]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 1_600_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


def base_archive(tmp_path: Path, name: str, files: dict[str, tuple[bytes, int]]) -> tuple[Path, str]:
    layer = rootfs_tar(tmp_path / f"{name}-rootfs.tar", files)
    dest = tmp_path / f"{name}.tar"
    config = {"architecture": "amd64", "os": "linux", "config": {"Labels": {"a": "b"}}, "history": [{}]}
    return dest, layer_archive(layer, dest, config, EPOCH)


def test_the_listing_names_the_file_whose_content_and_mode_differ(tmp_path: Path) -> None:
    same = {"etc/os-release": (b"bookworm", 0o644)}
    first, first_id = base_archive(tmp_path, "one", {**same, "etc/shadow": (b"root:*:20454:", 0o640)})
    second, second_id = base_archive(tmp_path, "two", {**same, "etc/shadow": (b"root:*:20781:", 0o600)})
    assert first_id != second_id
    report = member_difference(first, second)
    lines = [line for line in report.splitlines() if line.startswith("layer 0 ")]
    assert len(lines) == 1, report
    assert lines[0].startswith("layer 0 etc/shadow: 640 0:0 13 B")
    assert "| 600 0:0 13 B" in lines[0]
    assert "config differs" in report


def test_one_content_gives_one_image_id_and_no_difference(tmp_path: Path) -> None:
    files = {"bin/sh": (b"dash", 0o755), "etc/hostname": (b"", 0o644)}
    first, first_id = base_archive(tmp_path, "one", files)
    second, second_id = base_archive(tmp_path, "two", files)
    assert first_id == second_id
    assert member_difference(first, second) == "the archives hold the same config and layer members"
