"""The normaliser: two saves of one content, built at different times, rewrite to one image ID; the rewrite
streams (one clamped layer on disk at a time) and gives the image ID the whole-archive rewrite gave."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from learnerkit_build.repro import reproducible
from learnerkit_build.repro.reproducible import (
    LoadArchive,
    ReproducibleError,
    canonical_config,
    layer_archive,
    rewritten_save,
)
from learnerkit_build.repro.tarstream import TarWriter, chunk_file

EPOCH = 1767225600
EARLIER = 1_600_000_000
WHOLE_ARCHIVE_IDS = {
    "one layer": "sha256:b37219c79d2c0dca1a52926127ae084259069b37c272924de70cceda351bee21",
    "three layers, the first twice": "sha256:2c42a896ed515f4ea997a89395e456e67ee40799dc9a8e84d5285290c2b0572e",
}
"""What main's normaliser (`rewrite_archive`: the save written to a file, rewritten into a second one, commit
1f413f8) made of `docker_save(...)` below: the streamed rewrite must give the same image IDs."""


def layer_tar(
    mtime: float, owner: str, atime: str, files: tuple[str, ...] = ("usr/bin/tool",), padding: int = 0
) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in (*files, "etc/old.conf"):
            data = b"from a package" if name == "etc/old.conf" else f"binary {name}".encode() + bytes(padding)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uname, info.gname = len(data), 0o755, owner, owner
            info.mtime = EARLIER if name == "etc/old.conf" else mtime
            xattrs = {"SCHILY.xattr.security.capability": "cap"} if name == "usr/bin/tool" else {}
            info.pax_headers = {**xattrs, "atime": atime, "ctime": atime}
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def image_config(created: str, layers: int) -> dict[str, Any]:
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {"Labels": {"org.opencontainers.image.created": created, "a": "b"}},
        "history": [{"created": created, "created_by": f"RUN make {i}"} for i in range(layers)],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:whatever"] * layers},
    }


def docker_save(layers: list[bytes], created: str, *, reverse: bool = False, link: bytes = tarfile.SYMTYPE) -> bytes:
    """A `docker save` archive as Docker 20.10 writes it: members in lexical order (the config, the v1 layer
    folders, manifest.json, repositories), a layer saved before linked (`layer.tar` a symlink to the first);
    `reverse`: in the opposite order (manifest.json before the layers, a link before its target)."""
    raw = json.dumps(image_config(created, len(layers))).encode()
    config = f"{hashlib.sha256(raw).hexdigest()}.json"
    files: dict[str, bytes | str] = {config: raw, "repositories": b"{}"}
    first: dict[bytes, str] = {}
    folders = []
    for number, layer in enumerate(layers):
        folder = hashlib.sha256(f"{number}:{hashlib.sha256(layer).hexdigest()}".encode()).hexdigest()
        folders.append(folder)
        files[f"{folder}/VERSION"] = b"1.0"
        files[f"{folder}/json"] = json.dumps({"id": folder}).encode()
        files[f"{folder}/layer.tar"] = layer
        if layer in first:
            files[f"{folder}/layer.tar"] = f"../{first[layer]}" if link == tarfile.SYMTYPE else first[layer]
        first.setdefault(layer, f"{folder}/layer.tar")
    listing = [{"Config": config, "RepoTags": None, "Layers": [f"{folder}/layer.tar" for folder in folders]}]
    files["manifest.json"] = json.dumps(listing).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as out:
        for name in sorted(files, key=lambda name: name.split("/"), reverse=reverse):
            info = tarfile.TarInfo(name)
            content = files[name]
            if isinstance(content, str):
                info.type, info.linkname = link, content
                out.addfile(info)
            else:
                info.size = len(content)
                out.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def one_layer(mtime: float, owner: str, created: str) -> bytes:
    return docker_save([layer_tar(mtime, owner, str(mtime + 1))], created)


def three_layers(mtime: float, owner: str, created: str, **how: Any) -> bytes:
    first = layer_tar(mtime, owner, "1")
    return docker_save([first, layer_tar(mtime, owner, "1", files=("opt/app/main.py",)), first], created, **how)


SAVES = {"one layer": one_layer, "three layers, the first twice": three_layers}


def rewrite(saved: bytes, chunk: int = 1 << 16) -> tuple[str, bytes]:
    archive = LoadArchive(EPOCH)
    chunks = (saved[i : i + chunk] for i in range(0, len(saved), chunk))
    out = b"".join(rewritten_save(chunk_file(chunks), archive, "test-image"))
    return archive.image_id, out


def loaded(archive: bytes) -> tuple[bytes, list[dict[str, tarfile.TarInfo]]]:
    """What `docker load` reads of an archive: the config's bytes and each layer's members, in image order."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as out:
        manifest = json.loads(out.extractfile("manifest.json").read())  # type: ignore[union-attr]
        raw = out.extractfile(manifest[0]["Config"]).read()  # type: ignore[union-attr]
        layers = []
        for name in manifest[0]["Layers"]:
            with tarfile.open(fileobj=out.extractfile(name)) as layer:
                layers.append({m.name: m for m in layer})
    return raw, layers


@pytest.mark.parametrize("case", sorted(SAVES))
def test_the_streamed_rewrite_gives_the_image_id_of_the_whole_archive_rewrite(case: str) -> None:
    image_id, archive = rewrite(SAVES[case](1_780_000_000.25, "root", "2026-06-01T10:00:00.1Z"))
    assert image_id == WHOLE_ARCHIVE_IDS[case]
    raw, _ = loaded(archive)
    assert f"sha256:{hashlib.sha256(raw).hexdigest()}" == image_id


def test_two_builds_at_different_times_rewrite_to_one_image_id() -> None:
    first = rewrite(SAVES["one layer"](1_780_000_000.25, "root", "2026-06-01T10:00:00.1Z"))
    second = rewrite(SAVES["one layer"](1_790_000_000.5, "builder", "2026-09-24T11:12:13.9Z"))
    assert first == second
    raw, [members] = loaded(first[1])
    config = json.loads(raw)
    assert config["created"] == "2026-01-01T00:00:00Z" and config["history"][0]["created"] == config["created"]
    assert config["config"]["Labels"] == {"org.opencontainers.image.created": config["created"], "a": "b"}
    assert members["usr/bin/tool"].mtime == EPOCH, "a file the build wrote is clamped"
    assert members["etc/old.conf"].mtime == EARLIER, "an older time (from a package) is kept"
    assert members["usr/bin/tool"].pax_headers == {"SCHILY.xattr.security.capability": "cap"}
    assert members["usr/bin/tool"].uname == "" and members["usr/bin/tool"].mode == 0o755


@pytest.mark.parametrize(
    "how",
    [{"reverse": True}, {"link": tarfile.LNKTYPE}, {"reverse": True, "link": tarfile.LNKTYPE}],
    ids=["manifest and link first", "hard link", "hard link first"],
)
def test_members_in_any_order_and_a_linked_layer_give_one_image(how: dict[str, Any]) -> None:
    """Any order of members, a layer saved twice as a symlink or a hard link, chunks of any size: one image, and
    the layer saved twice is written once."""
    image_id, archive = rewrite(three_layers(1, "r", "x", **how), chunk=777)
    assert image_id == rewrite(three_layers(1, "r", "x"), chunk=1 << 20)[0]
    raw, layers = loaded(archive)
    diff_ids = json.loads(raw)["rootfs"]["diff_ids"]
    assert len(diff_ids) == 3 and diff_ids[0] == diff_ids[2] != diff_ids[1]
    assert set(layers[1]) == {"opt/app/main.py", "etc/old.conf"}
    with tarfile.open(fileobj=io.BytesIO(archive)) as out:
        assert sum(name.endswith("layer.tar") for name in out.getnames()) == 2


def test_an_oci_style_save_reads_the_same() -> None:
    """Newer engines save blobs by digest (the config, the layers, an OCI manifest) and list the same layer blob
    twice for a layer held twice: the same image as the Docker 20.10 save of the same content."""
    first = layer_tar(1, "r", "1")
    layers = [first, layer_tar(1, "r", "1", files=("opt/app/main.py",)), first]
    raw = json.dumps(image_config("x", 3)).encode()
    blobs = {f"blobs/sha256/{hashlib.sha256(data).hexdigest()}": data for data in (raw, *layers)}
    blobs["blobs/sha256/" + "0" * 64] = (
        b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'
    )
    names = [f"blobs/sha256/{hashlib.sha256(layer).hexdigest()}" for layer in layers]
    listing = [{"Config": f"blobs/sha256/{hashlib.sha256(raw).hexdigest()}", "RepoTags": None, "Layers": names}]
    members = {**blobs, "index.json": b"{}", "manifest.json": json.dumps(listing).encode(), "oci-layout": b"{}"}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as out:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            out.addfile(info, io.BytesIO(members[name]))
    assert rewrite(buffer.getvalue())[0] == rewrite(three_layers(1, "r", "x"))[0]


def test_the_rewrite_streams_one_clamped_layer_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first layer goes out before the rest of the save is read, and one temporary file is open at a time."""
    big = [layer_tar(1, "r", "1", files=(name,), padding=1 << 20) for name in ("a", "b", "c")]
    saved = docker_save(big, "x")
    read = 0
    open_files, most = 0, 0
    temporary_file = tempfile.TemporaryFile

    def chunks() -> Iterator[bytes]:
        nonlocal read
        for i in range(0, len(saved), 4096):
            read += 4096
            yield saved[i : i + 4096]

    class Counted:
        def __init__(self) -> None:
            self.file = temporary_file()

        def __enter__(self) -> IO[bytes]:
            nonlocal open_files, most
            open_files += 1
            most = max(most, open_files)
            return self.file.__enter__()

        def __exit__(self, *exc: object) -> None:
            nonlocal open_files
            open_files -= 1
            self.file.__exit__(None, None, None)

    monkeypatch.setattr(reproducible.tempfile, "TemporaryFile", Counted)
    blocks = rewritten_save(chunk_file(chunks()), LoadArchive(EPOCH), "test-image")
    next(blocks)
    assert read < len(saved) / 2
    list(blocks)
    assert read >= len(saved) and most == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda files: files.pop("manifest.json"), r"test-image has no manifest manifest\.json"),
        (lambda files: files.update({"manifest.json": b"[]"}), r"manifest\.json does not list one image"),
        (lambda files: files.update({"manifest.json": b'[{"Config": "c.json"}]'}), r"does not list one image"),
        (
            lambda files: files.update({"manifest.json": b'[{"Config": "gone.json", "Layers": []}]'}),
            r"test-image has no config gone\.json",
        ),
        (
            lambda files: files.update({"manifest.json": b'[{"Config": "c.json", "Layers": ["c.json"]}]'}),
            r"its manifest's layer c\.json is not a layer tar",
        ),
        (
            lambda files: files.update({"manifest.json": b"{not json"}),
            r"rewriting the `docker save` archive of test-image",
        ),
    ],
)
def test_a_save_without_what_it_must_hold_is_refused_naming_the_member(edit, message) -> None:  # type: ignore[no-untyped-def]
    files = {
        "c.json": json.dumps(image_config("x", 0)).encode(),
        "manifest.json": b'[{"Config": "c.json", "Layers": []}]',
    }
    edit(files)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as out:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    with pytest.raises(ReproducibleError, match=message):
        rewrite(buffer.getvalue())


def test_a_full_disk_is_a_reproducible_error_naming_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not an OSError: raised while the HTTP client sends `docker load` its body, that would read as a broken
    connection to the engine."""

    def full() -> IO[bytes]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reproducible.tempfile, "TemporaryFile", full)
    with pytest.raises(ReproducibleError, match=r"of test-image: \[Errno 28\] No space left on device"):
        rewrite(one_layer(1, "r", "x"))


def test_the_writer_writes_what_tarfile_writes() -> None:
    members = [("a/layer.tar", b"x" * 1000), ("b.json", b"{}"), ("manifest.json", b"y" * 512)]
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    writer = TarWriter()
    written = b"".join(block for name, data in members for block in writer.member(name, len(data), [data]))
    assert written + writer.end() == expected.getvalue()


def test_the_canonical_config_names_the_new_layers_and_sorts_its_keys() -> None:
    raw = canonical_config({"os": "linux", "architecture": "amd64"}, ["sha256:1"], EPOCH)
    assert raw.startswith(b'{"architecture":"amd64","config":{},"created":"2026-01-01T00:00:00Z"')
    assert json.loads(raw)["rootfs"] == {"type": "layers", "diff_ids": ["sha256:1"]}


def test_a_layer_archive_clamps_times_and_names_its_config_by_its_sha256(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(layer_tar(1_790_000_000.5, "builder", atime="1"))
    image = layer_archive(rootfs, tmp_path / "image.tar", {"os": "linux", "history": [{"created_by": "x"}]}, EPOCH)
    raw, [members] = loaded((tmp_path / "image.tar").read_bytes())
    assert image == f"sha256:{hashlib.sha256(raw).hexdigest()}"
    config = json.loads(raw)
    assert config["created"] == config["history"][0]["created"] == "2026-01-01T00:00:00Z"
    assert {name: member.mtime for name, member in members.items()} == {"usr/bin/tool": EPOCH, "etc/old.conf": EARLIER}
