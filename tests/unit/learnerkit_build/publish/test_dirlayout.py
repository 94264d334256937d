"""The layout an image is pushed through, against a fake `skopeo` on PATH that logs its argv, writes a layout
as skopeo's `dir:` transport does, and "pushes" a layout's manifest into a folder that a faked registry serves."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from learnerkit.common.errors import ToolMissingError
from learnerkit_build.publish import dirlayout, registry
from learnerkit_build.publish.dirlayout import (
    COMPRESSION,
    LayoutError,
    daemon_source,
    push_fresh,
    push_layout,
    write_layout,
)

FAKE_SKOPEO = """\
import hashlib, json, os, pathlib, sys

argv = sys.argv[1:]
with open(os.environ["FAKE_SKOPEO_LOG"], "a") as log:
    log.write(json.dumps(argv) + "\\n")
if argv == ["--version"]:
    print("skopeo version 1.9.3")
    sys.exit(0)
if os.environ.get("FAKE_SKOPEO_FAIL"):
    print("time=now level=fatal msg=" + os.environ["FAKE_SKOPEO_FAIL"], file=sys.stderr)
    sys.exit(1)
source, dest = argv[-2:]
if dest.startswith("dir:"):
    folder = pathlib.Path(dest[4:])
    folder.mkdir()
    config, layer = b'{"architecture": "amd64"}', b"a compressed layer"
    parts = []
    for data in (config, layer):
        digest = hashlib.sha256(data).hexdigest()
        (folder / digest).write_bytes(data)
        parts.append({"size": len(data), "digest": "sha256:" + digest})
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **parts[0]},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", **parts[1]}],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, separators=(",", ":")))
elif dest.startswith("docker://"):
    served = pathlib.Path(os.environ["FAKE_REGISTRY"]) / dest.removeprefix("docker://").replace("/", "_")
    body = (pathlib.Path(source.removeprefix("dir:")) / "manifest.json").read_bytes()
    if os.environ.get("FAKE_SKOPEO_REWRITE"):
        body = json.dumps(json.loads(body), indent=1).encode()
    served.write_bytes(body)
"""
MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


@dataclass
class FakeSkopeo:
    log: Path
    served: Path
    """What the fake registry serves: one file per `host/repository:tag`."""

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def fake_skopeo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSkopeo:
    bin_dir, served = tmp_path / "bin", tmp_path / "served"
    bin_dir.mkdir()
    served.mkdir()
    exe = bin_dir / "skopeo"
    exe.write_text(f"#!{sys.executable}\n{FAKE_SKOPEO}", encoding="utf-8")
    exe.chmod(0o755)
    fake = FakeSkopeo(tmp_path / "skopeo.log", served)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_SKOPEO_LOG", str(fake.log))
    monkeypatch.setenv("FAKE_REGISTRY", str(served))

    def get_manifest(host: str, repository: str, reference: str) -> tuple[bytes, str] | None:
        file = served / f"{host}_{repository}:{reference}".replace("/", "_")
        if not file.exists():
            return None
        body = file.read_bytes()
        return body, registry.sha256_digest(body)

    monkeypatch.setattr(dirlayout.registry, "get_manifest", get_manifest)
    return fake


def test_a_layout_is_written_fresh_with_the_fixed_compression_skopeos_temporary_files_beside_it(
    fake_skopeo: FakeSkopeo, tmp_path: Path
) -> None:
    layout = tmp_path / "scratch" / "layout"
    layout.parent.mkdir()
    digest = write_layout(daemon_source("sha256:abc"), layout)
    [argv] = fake_skopeo.calls()
    source, dest = "docker-daemon:sha256:abc", f"dir:{layout}"
    assert argv == ["--tmpdir", str(layout.parent), "copy", "--quiet", *COMPRESSION, source, dest]
    assert digest == registry.sha256_digest((layout / "manifest.json").read_bytes())
    with pytest.raises(LayoutError, match=rf"{layout} exists: a layout is written into a new folder"):
        write_layout(daemon_source("sha256:abc"), layout)
    assert len(fake_skopeo.calls()) == 1


def test_a_pushed_layout_is_what_the_registry_serves_under_the_tag(fake_skopeo: FakeSkopeo, tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    digest = write_layout(daemon_source("sha256:abc"), layout)
    pushed = push_layout(layout, "127.0.0.1:5000", "team/learner", "1")
    assert fake_skopeo.calls()[-1] == [
        "copy",
        "--quiet",
        "--preserve-digests",
        "--dest-tls-verify=false",
        f"dir:{layout}",
        "docker://127.0.0.1:5000/team/learner:1",
    ]
    manifest = json.loads((layout / "manifest.json").read_bytes())
    assert (pushed.reference, pushed.manifest, pushed.media_type) == (
        "127.0.0.1:5000/team/learner:1",
        digest,
        MEDIA_TYPE,
    )
    assert pushed.config == manifest["config"]["digest"]
    assert pushed.layers == (manifest["layers"][0]["digest"],)
    assert pushed.size == manifest["config"]["size"] + manifest["layers"][0]["size"]


def test_a_registry_serving_another_manifest_than_the_layouts_fails_naming_both(
    fake_skopeo: FakeSkopeo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = tmp_path / "layout"
    digest = write_layout(daemon_source("sha256:abc"), layout)
    monkeypatch.setenv("FAKE_SKOPEO_REWRITE", "1")  # the registry stores the manifest re-serialised
    with pytest.raises(LayoutError) as refused:
        push_layout(layout, "127.0.0.1:5000", "team/learner", "1")
    served = (fake_skopeo.served / "127.0.0.1:5000_team_learner:1").read_bytes()
    assert str(refused.value) == (
        f"127.0.0.1:5000/team/learner:1: pushed {digest} from {layout}, but the registry serves "
        f"{registry.sha256_digest(served)}"
    )


def test_a_failed_skopeo_names_its_command_and_says_why(
    fake_skopeo: FakeSkopeo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SKOPEO_FAIL", "no space left on device")
    with pytest.raises(LayoutError, match=r"skopeo copy --quiet .* failed \(1\): .*no space left on device"):
        write_layout(daemon_source("sha256:abc"), tmp_path / "layout")


def test_without_skopeo_the_tool_is_named_and_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match=r"skopeo is not installed \(Debian package `skopeo`"):
        write_layout(daemon_source("sha256:abc"), tmp_path / "layout")


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tempfile's folder (what TMPDIR sets), empty."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_fresh_push_writes_its_layout_in_a_temporary_folder_gone_after_and_says_what_it_does(
    fake_skopeo: FakeSkopeo, temporary: Path
) -> None:
    lines: list[str] = []
    done = push_fresh("docker-daemon:sha256:abc", 1_000, "127.0.0.1:5000", "team/learner", "1", lines.append)
    version, write, push = fake_skopeo.calls()
    assert version == ["--version"]
    [scratch] = {Path(write[1]), Path(push[-2].removeprefix("dir:")).parent}
    assert scratch.parent == temporary and scratch.name.startswith("learnerkit-layout-")
    assert list(temporary.iterdir()) == []
    assert (done.method, done.skopeo, done.compression) == ("skopeo-dir-layout", "1.9.3", "gzip, level 6")
    assert done.image.reference == "127.0.0.1:5000/team/learner:1"
    assert [line.split(" ", 1)[0] for line in lines] == ["writing", "layout", "pushed"]
    assert (
        lines[0]
        == f"writing docker-daemon:sha256:abc (0.00 GB) into a fresh layout in {scratch} (skopeo 1.9.3, gzip, level 6)"
    )
    assert done.image.manifest in lines[1]


def test_a_failed_fresh_push_leaves_no_temporary_folder(
    fake_skopeo: FakeSkopeo, temporary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SKOPEO_FAIL", "writing blob: no space left on device")
    with pytest.raises(LayoutError, match="no space left on device"):
        push_fresh("docker-daemon:sha256:abc", 1_000, "127.0.0.1:5000", "team/learner", "1", lambda _line: None)
    assert list(temporary.iterdir()) == []


def test_a_fresh_push_without_room_for_twice_the_image_is_refused_before_skopeo_copies_anything(
    fake_skopeo: FakeSkopeo, temporary: Path
) -> None:
    free = shutil.disk_usage(temporary).free
    with pytest.raises(LayoutError) as refused:
        push_fresh("docker-daemon:sha256:abc", free, "127.0.0.1:5000", "team/learner", "1", lambda _line: None)
    needs = f"needs up to {2 * free / 1e9:.2f} GB in {temporary}/learnerkit-layout-"
    assert str(refused.value).startswith(f"docker-daemon:sha256:abc: a layout of it {needs}")
    assert "set TMPDIR to a folder with room" in str(refused.value)
    assert fake_skopeo.calls() == [["--version"]]
    assert list(temporary.iterdir()) == []
