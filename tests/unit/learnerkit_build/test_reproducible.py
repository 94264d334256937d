"""The normaliser: two saves of one content, built at different times, rewrite to one image ID."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from learnerkit_build.reproducible import canonical_config, layer_archive, rewrite_archive

EPOCH = 1767225600


def layer_tar(mtime: float, owner: str, atime: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, xattrs in (
            ("usr/bin/tool", b"binary", {"SCHILY.xattr.security.capability": "cap"}),
            ("etc/old.conf", b"from a package", {}),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uname, info.gname = len(data), 0o755, owner, owner
            info.mtime = 1_600_000_000 if name == "etc/old.conf" else mtime
            info.pax_headers = {**xattrs, "atime": atime, "ctime": atime}
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def saved_image(path: Path, mtime: float, owner: str, created: str) -> Path:
    layer = layer_tar(mtime, owner, atime=str(mtime + 1))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {"Labels": {"org.opencontainers.image.created": created, "a": "b"}},
        "history": [{"created": created, "created_by": "RUN make"}],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:whatever"]},
    }
    with tarfile.open(path, "w") as out:
        for name, data in (
            ("abc/layer.tar", layer),
            ("c0ffee.json", json.dumps(config).encode()),
            ("manifest.json", json.dumps([{"Config": "c0ffee.json", "Layers": ["abc/layer.tar"]}]).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    return path


def test_two_builds_at_different_times_rewrite_to_one_image_id(tmp_path: Path) -> None:
    first = saved_image(tmp_path / "1.tar", 1_780_000_000.25, "root", "2026-06-01T10:00:00.1Z")
    second = saved_image(tmp_path / "2.tar", 1_790_000_000.5, "builder", "2026-09-24T11:12:13.9Z")
    ids = [rewrite_archive(saved, tmp_path / f"out-{saved.name}", EPOCH) for saved in (first, second)]
    assert ids[0] == ids[1]
    assert (tmp_path / "out-1.tar").read_bytes() == (tmp_path / "out-2.tar").read_bytes()
    with tarfile.open(tmp_path / "out-1.tar") as out:
        manifest = json.loads(out.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(out.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        with tarfile.open(fileobj=out.extractfile(manifest[0]["Layers"][0])) as layer:
            members = {m.name: m for m in layer}
    assert config["created"] == "2026-01-01T00:00:00Z" and config["history"][0]["created"] == config["created"]
    assert config["config"]["Labels"] == {"org.opencontainers.image.created": config["created"], "a": "b"}
    assert members["usr/bin/tool"].mtime == EPOCH, "a file the build wrote is clamped"
    assert members["etc/old.conf"].mtime == 1_600_000_000, "an older time (from a package) is kept"
    assert members["usr/bin/tool"].pax_headers == {"SCHILY.xattr.security.capability": "cap"}
    assert members["usr/bin/tool"].uname == "" and members["usr/bin/tool"].mode == 0o755


def test_the_canonical_config_names_the_new_layers_and_sorts_its_keys() -> None:
    raw = canonical_config({"os": "linux", "architecture": "amd64"}, ["sha256:1"], EPOCH)
    assert raw.startswith(b'{"architecture":"amd64","config":{},"created":"2026-01-01T00:00:00Z"')
    assert json.loads(raw)["rootfs"] == {"type": "layers", "diff_ids": ["sha256:1"]}


def test_a_layer_archive_clamps_times_and_names_its_config_by_its_sha256(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(layer_tar(1_790_000_000.5, "builder", atime="1"))
    image = layer_archive(rootfs, tmp_path / "image.tar", {"os": "linux", "history": [{"created_by": "x"}]}, EPOCH)
    with tarfile.open(tmp_path / "image.tar") as out:
        manifest = json.loads(out.extractfile("manifest.json").read())  # type: ignore[union-attr]
        raw = out.extractfile(manifest[0]["Config"]).read()  # type: ignore[union-attr]
        with tarfile.open(fileobj=out.extractfile(manifest[0]["Layers"][0])) as layer:
            times = {member.name: member.mtime for member in layer}
    assert image == f"sha256:{hashlib.sha256(raw).hexdigest()}"
    config = json.loads(raw)
    assert config["created"] == config["history"][0]["created"] == "2026-01-01T00:00:00Z"
    assert times == {"usr/bin/tool": EPOCH, "etc/old.conf": 1_600_000_000}
