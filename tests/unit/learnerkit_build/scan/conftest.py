"""Synthetic `docker save` archives: layers of files, whiteouts, a config and history, no engine needed."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from learnerkit_build.scan.layers import ImageIndex, index_archive
from learnerkit_build.scan.packages import wanted
from learnerkit_build.scan.secrets import SecretScanner

PASSWD = "root:x:0:0:root:/root:/bin/bash\nlearner:x:1000:0::/tmp:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nlearner:x:1000:\n"
SHADOW = "root:*:19000:0:99999:7:::\nlearner:!:19000::::::\n"
DPKG_STATUS = """Package: libc6
Status: install ok installed
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u7

Package: tini
Status: install ok installed
Architecture: amd64
Version: 0.19.0-1
"""
OS_RELEASE = 'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n'
GOOD_CONFIG: dict[str, Any] = {
    "User": "learner",
    "Healthcheck": {"Test": ["CMD", "/usr/local/bin/learner-run", "--health"]},
    "Env": ["PATH=/usr/bin", "DATA_DIR=/job/data"],
    "Labels": {
        "org.opencontainers.image.title": "t",
        "org.opencontainers.image.version": "1",
        "org.opencontainers.image.revision": "abc",
        "org.opencontainers.image.created": "2026-11-22",
        "org.opencontainers.image.base.name": "learnerkit/base:x",
    },
}


@dataclass
class F:
    """A file in a synthetic layer; `whiteout` makes it a deletion of `path`."""

    path: str
    content: bytes | str = b""
    mode: int = 0o644
    kind: str = "file"
    linkname: str = ""
    whiteout: bool = False


@dataclass
class LayerSpec:
    files: list[F]
    created_by: str = "RUN true"


@dataclass
class ImageSpecT:
    layers: list[LayerSpec] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=lambda: json.loads(json.dumps(GOOD_CONFIG)))
    extra_history: list[dict[str, Any]] = field(default_factory=list)


def base_layer() -> LayerSpec:
    return LayerSpec(
        [
            F("/tmp", mode=0o1777, kind="dir"),
            F("/etc/passwd", PASSWD),
            F("/etc/group", GROUP),
            F("/etc/shadow", SHADOW, mode=0o640),
            F("/etc/os-release", OS_RELEASE),
            F("/var/lib/dpkg/status", DPKG_STATUS),
            F("/var/lib/dpkg/info/tini.list", "/usr/bin/tini\n"),
            F("/usr/bin/tini", b"\x7fELF\0binary", mode=0o755),
        ],
        "Imported from -",
    )


def write_archive(spec: ImageSpecT, dest: Path) -> Path:
    layer_names, diff_ids, history = [], [], []
    with tarfile.open(dest, "w") as outer:
        for number, layer in enumerate(spec.layers):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as inner:
                for item in layer.files:
                    name = item.path.lstrip("/")
                    if item.whiteout:
                        parent, _, base = name.rpartition("/")
                        name = f"{parent}/.wh.{base}" if parent else f".wh.{base}"
                    info = tarfile.TarInfo(name)
                    info.mode = item.mode
                    data = item.content.encode() if isinstance(item.content, str) else item.content
                    if item.kind == "dir":
                        info.type = tarfile.DIRTYPE
                    elif item.kind == "symlink":
                        info.type, info.linkname = tarfile.SYMTYPE, item.linkname
                    else:
                        info.size = len(data)
                    inner.addfile(info, io.BytesIO(data) if info.isreg() else None)
            raw = buffer.getvalue()
            name = f"layer{number}/layer.tar"
            _add(outer, name, raw)
            layer_names.append(name)
            diff_ids.append(f"sha256:{number:064x}")
            history.append({"created_by": layer.created_by})
        history += spec.extra_history
        config = {
            "architecture": "amd64",
            "config": spec.config,
            "history": history,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        _add(outer, "config.json", json.dumps(config).encode())
        _add(outer, "manifest.json", json.dumps([{"Config": "config.json", "Layers": layer_names}]).encode())
    return dest


def _add(outer: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    outer.addfile(info, io.BytesIO(data))


Indexed = tuple[ImageIndex, SecretScanner]
MakeIndex = Callable[..., Indexed]


@pytest.fixture
def make_index(tmp_path: Path) -> MakeIndex:
    """Index a synthetic image: a good base layer, the given extra layers, and config changes."""

    def make(
        *layers: LayerSpec, config: dict[str, Any] | None = None, history: list[dict[str, Any]] | None = None
    ) -> Indexed:
        spec = ImageSpecT(layers=[base_layer(), *layers], extra_history=history or [])
        if config:
            spec.config.update(config)
        archive = write_archive(spec, tmp_path / "image.tar")
        scanner = SecretScanner()
        return index_archive(archive, "test/image:1", wanted=wanted, visit=scanner), scanner

    return make
