"""Bit-identical rebuilds: the base made twice from its lock, and a locked image built twice without BuildKit's
cache, from two checkouts in different folders, the second under a clock 30 days ahead (libfaketime), another
time zone, umask 077 (with umask-077 modes), its own hostname, each have one image ID and, pushed through two
fresh layouts to two repositories of the test registry, one manifest digest, whose config is the image ID, and
the same layer digests; on
a difference the failure says what differs (diffoscope, or a listing). The normaliser streams the engine's own
save of an image (a layer saved twice linked to the first) back into it as its clamped image.

Cost on 2 shared cores: two mmdebstrap runs of the base, 28 to 106 s with the load and the layouts; two cold
builds each of the sidecar and mxnet:1.9.1-cpu on the existing base, 43 and 53 s on a quiet machine, about 4
minutes loaded (mxnet with the layouts: 330 s loaded).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import socket
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import recipe_for
from learnerkit_build.builds.basemake import base_archive
from learnerkit_build.builds.elsewhere import Environment, Rebuilt, days_ahead, rebuild_elsewhere
from learnerkit_build.builds.images import SOURCE_REVISION_ENV, BuildResult, build_image, source_revision
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.lock.model import read_lock
from learnerkit_build.publish.dirlayout import PushedImage, archive_source, daemon_source, push_image
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import SOURCE_DATE_EPOCH, BuildInputs
from learnerkit_build.repro.imagediff import describe_difference
from learnerkit_build.repro.reproducible import canonical_config, clamp_layer, normalise_image
from tests.integration.conftest import REPO

# The builds here re-tag the checkout's images and put every learnerkit tag back afterwards: alone, after the
# parallel part, where no other test reads or makes a tag meanwhile.
pytestmark = pytest.mark.serial


def quiet(_line: str) -> None:
    """Build logs are not this test's subject."""


def checkout(dest: Path, folders: list[str], *, private: bool) -> Path:
    """A copy of the project's `folders` at `dest`; `private`: as a umask-077 checkout makes it."""
    for folder in folders:
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if private:
        for path in dest.rglob("*"):
            path.chmod(0o700 if path.is_dir() or path.stat().st_mode & 0o111 else 0o600)
    return dest


@pytest.fixture
def tags_kept(docker_client: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The builds here tag their images as `make images` does (`learnerkit/sidecar:0.1.0`, the content tag), from
    copies without git told the checkout's revision (`$LEARNERKIT_SOURCE_REVISION`, as a release archive would
    be): from a clean checkout whose images are built they are those images, and no tag moves, even when the
    run is killed here. From a dirty tree they may differ: every learnerkit tag is put back where it was, so the
    tests after these see the images the checkout built (the publish test read a moved mxnet tag)."""
    monkeypatch.setenv(SOURCE_REVISION_ENV, source_revision(REPO))
    before = _learnerkit_tags(docker_client)
    yield
    after = _learnerkit_tags(docker_client)
    for reference, image_id in before.items():
        if after.get(reference) != image_id:
            repository, _, tag = reference.rpartition(":")
            docker_client.images.get(image_id).tag(repository, tag)
    for reference in after.keys() - before.keys():
        try:
            docker_client.images.remove(reference)
        except docker.errors.APIError as e:
            # 409: a container uses it. Other worktrees build the same inputs to the same content tag and image
            # (that is the point) and may run it meanwhile: theirs to remove.
            if e.status_code != HTTPStatus.CONFLICT:
                raise


def _learnerkit_tags(docker_client: Any) -> dict[str, str]:
    return {
        reference: image.id
        for image in docker_client.images.list()
        for reference in image.tags
        if reference.startswith("learnerkit/")
    }


ELSEWHERE = Environment()
"""The second build: a clock 30 days ahead, Asia/Tokyo, umask 077, its own hostname, another folder."""


def assert_moved(rebuilt: Rebuilt) -> None:
    """The second build really ran in the varied environment."""
    assert days_ahead(rebuilt.clock) > ELSEWHERE.days_ahead - 1
    assert rebuilt.hostname == ELSEWHERE.hostname != socket.gethostname()
    assert rebuilt.zone == "JST"
    assert rebuilt.umask == ELSEWHERE.umask


def assert_same_in_the_registry(first: PushedImage, second: PushedImage, image_id: str) -> None:
    assert first.reference != second.reference
    assert (first.manifest, first.config, first.layers) == (second.manifest, second.config, second.layers)
    assert first.config == image_id, "the registry's config is not the image's own"
    assert first.media_type == "application/vnd.docker.distribution.manifest.v2+json"


@pytest.mark.usefixtures("tags_kept")
@pytest.mark.parametrize(
    ("what", "folders", "build"),
    [
        (
            "sidecar",
            ["controller_sidecar", "learner_base"],
            lambda root, inputs: build_sidecar(root, inputs, quiet, rebuild=True),
        ),
        (
            "mxnet:1.9.1-cpu",
            ["learner_base", "frameworks/mxnet"],
            lambda root, inputs: build_image(
                root, load_matrix(root).select(["mxnet:1.9.1-cpu"])[0], inputs, quiet, rebuild=True
            ),
        ),
    ],
    ids=["sidecar", "mxnet-cpu"],
)
def test_two_cold_builds_apart_have_one_image_id_and_one_manifest_digest(
    what: str,
    folders: list[str],
    build: Callable[[Path, BuildInputs], BuildResult],
    build_inputs: BuildInputs,
    registry: str,
    tmp_path: Path,
) -> None:
    name = what.replace(":", "-").replace(".", "-")
    first = build(checkout(tmp_path / "one", folders, private=False), build_inputs)
    assert first.status == "built"
    (tmp_path / "one" / "push").mkdir()
    first_pushed = push_image(
        daemon_source(str(first.image_id)), tmp_path / "one" / "push", registry, f"repro/{name}-one", "t"
    )
    root = checkout(tmp_path / "elsewhere" / "two", folders, private=True)
    (tmp_path / "elsewhere" / "scratch").mkdir()
    second = rebuild_elsewhere(what, root, tmp_path / "elsewhere" / "scratch", ELSEWHERE)
    assert_moved(second)
    assert first.image_id == second.image_id
    second_pushed = push_image(
        daemon_source(second.image_id), tmp_path / "elsewhere" / "scratch", registry, f"repro/{name}-two", "t"
    )
    assert_same_in_the_registry(first_pushed, second_pushed, str(first.image_id))
    config = engine.image_attrs(str(first.image_id))
    assert config["Created"].startswith("2026-01-01T00:00:00")
    assert config["Config"]["Labels"]["org.opencontainers.image.created"] == "2026-01-01T00:00:00Z"


def test_two_base_builds_apart_have_one_image_id_and_one_manifest_digest(tmp_path: Path, registry: str) -> None:
    one = tmp_path / "one"
    root = checkout(one / "project", ["learner_base", "frameworks/mxnet"], private=False)
    (one / "scratch").mkdir()
    first, first_id = base_archive(recipe_for("debian-bookworm", root), one / "scratch", quiet)
    two = tmp_path / "elsewhere" / "two"
    root = checkout(two / "project", ["learner_base", "frameworks/mxnet"], private=True)
    (two / "scratch").mkdir()
    rebuilt = rebuild_elsewhere("base", root, two / "scratch", ELSEWHERE)
    assert_moved(rebuilt)
    assert rebuilt.build_clock is not None, "mmdebstrap logged no clock"
    assert days_ahead(rebuilt.build_clock) > ELSEWHERE.days_ahead - 1, "mmdebstrap ran on the real clock"
    assert rebuilt.archive is not None
    second = Path(rebuilt.archive)
    assert first_id == rebuilt.image_id, describe_difference(first, second)
    (one / "push").mkdir()
    (two / "push").mkdir()
    assert_same_in_the_registry(
        push_image(archive_source(first), one / "push", registry, "repro/base-one", "t"),
        push_image(archive_source(second), two / "push", registry, "repro/base-two", "t"),
        first_id,
    )
    with tarfile.open(first) as archive:
        manifest = json.loads(archive.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(archive.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
    labels = config["config"]["Labels"]
    assert config["created"] == labels["org.opencontainers.image.created"] == "2026-01-01T00:00:00Z"
    lock = read_lock(REPO / "learner_base" / "lock" / "debian-bookworm.json")
    assert sorted(labels["io.learnerkit.base.packages"].split(",")) == lock.dpkg_list().split()


def layer_bytes(files: dict[str, bytes], mtime: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uname = len(data), mtime, "builder"
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_the_engines_save_of_an_image_streams_back_as_its_clamped_image(docker_client: Any) -> None:
    """A three-layer image whose third layer is its first again (the engine saves it as a symlink to the first),
    with times after SOURCE_DATE_EPOCH, normalised through the engine's save and load streams: the image its
    layers clamped and its config made canonical give. Untagged images, removed afterwards."""
    now = 1_790_000_000
    first = layer_bytes({"app/one": b"1" * 70_000}, now)
    layers = [first, layer_bytes({"app/two": b"2"}, now), first]
    created = "2026-09-24T11:12:13.9Z"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {"Labels": {"org.opencontainers.image.created": created}},
        "history": [{"created": created, "created_by": f"RUN step {i}"} for i in range(3)],
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers]},
    }
    raw = json.dumps(config).encode()
    members = {f"{i}/layer.tar": layer for i, layer in enumerate(layers)}
    members["config.json"] = raw
    members["manifest.json"] = json.dumps(
        [{"Config": "config.json", "Layers": [f"{i}/layer.tar" for i in range(3)]}]
    ).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as out:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    clamped = []
    for layer in layers:
        with tempfile.TemporaryFile() as dest:
            clamped.append(f"sha256:{clamp_layer(io.BytesIO(layer), dest, SOURCE_DATE_EPOCH)}")
    expected = f"sha256:{hashlib.sha256(canonical_config(config, clamped, SOURCE_DATE_EPOCH)).hexdigest()}"
    source = f"sha256:{hashlib.sha256(raw).hexdigest()}"
    docker_client.images.load(archive.getvalue())
    try:
        assert normalise_image(source, SOURCE_DATE_EPOCH) == expected
        image = docker_client.images.get(expected)
        assert image.attrs["RootFS"]["Layers"] == clamped and clamped[0] == clamped[2] != clamped[1]
        assert image.attrs["Created"].startswith("2026-01-01T00:00:00") and not image.tags
    finally:
        for image_id in (expected, source):
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(image_id)
