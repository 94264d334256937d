"""Bit-identical rebuilds: the base made twice from its lock, and a locked image built twice without BuildKit's
cache, from two checkouts in different folders (the second under umask 077, with umask-077 modes and another
time zone), each have one image ID; on a difference the failure says what differs (diffoscope, or a listing).

Cost on 2 shared cores: two mmdebstrap runs of the base, 28 to 86 s with the load; two cold builds each of the
sidecar and mxnet:1.9.1-cpu on the existing base, 43 and 53 s on a quiet machine, about 4 minutes loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit_build.baseimage import base_archive, recipe_for
from learnerkit_build.imagediff import describe_difference
from learnerkit_build.images import BuildResult, build_image
from learnerkit_build.lock.model import read_lock
from learnerkit_build.matrix import load_matrix
from learnerkit_build.render import BuildInputs
from learnerkit_build.sidecarimage import build_sidecar
from tests.integration.conftest import REPO


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
def tags_kept(docker_client: Any) -> Iterator[None]:
    """The builds here tag their images as `make images` does (`learnerkit/sidecar:0.1.0`, the content tag), but
    build from copies without git (revision `unknown`): every learnerkit tag is put back where it was, so the
    tests after these see the images the checkout built (the publish test read a moved mxnet tag)."""
    before = _learnerkit_tags(docker_client)
    yield
    after = _learnerkit_tags(docker_client)
    for reference, image_id in before.items():
        if after.get(reference) != image_id:
            repository, _, tag = reference.rpartition(":")
            docker_client.images.get(image_id).tag(repository, tag)
    for reference in after.keys() - before.keys():
        docker_client.images.remove(reference)


def _learnerkit_tags(docker_client: Any) -> dict[str, str]:
    return {
        reference: image.id
        for image in docker_client.images.list()
        for reference in image.tags
        if reference.startswith("learnerkit/")
    }


@pytest.mark.usefixtures("tags_kept")
@pytest.mark.parametrize(
    ("folders", "build"),
    [
        (["controller_sidecar", "learner_base"], lambda root, inputs: build_sidecar(root, inputs, quiet, rebuild=True)),
        (
            ["learner_base", "frameworks/mxnet"],
            lambda root, inputs: build_image(
                root, load_matrix(root).select(["mxnet:1.9.1-cpu"])[0], inputs, quiet, rebuild=True
            ),
        ),
    ],
    ids=["sidecar", "mxnet-cpu"],
)
def test_two_cold_builds_from_two_checkouts_have_one_image_id(
    folders: list[str],
    build: Callable[[Path, BuildInputs], BuildResult],
    build_inputs: BuildInputs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = build(checkout(tmp_path / "one", folders, private=False), build_inputs)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    second = build(checkout(tmp_path / "elsewhere" / "two", folders, private=True), build_inputs)
    assert first.status == second.status == "built"
    assert first.image_id == second.image_id
    config = engine.image_attrs(str(first.image_id))
    assert config["Created"].startswith("2026-01-01T00:00:00")
    assert config["Config"]["Labels"]["org.opencontainers.image.created"] == "2026-01-01T00:00:00Z"


@pytest.fixture
def restore_clock_and_umask() -> Iterator[None]:
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    os.umask(umask)
    time.tzset()


def test_two_base_builds_from_two_checkouts_have_one_image_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_clock_and_umask: None
) -> None:
    made = []
    for folder, umask, zone in (
        (tmp_path / "one", 0o022, "UTC"),
        (tmp_path / "elsewhere" / "two", 0o077, "Asia/Tokyo"),
    ):
        os.umask(umask)
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        root = checkout(folder / "project", ["learner_base", "frameworks/mxnet"], private=umask == 0o077)
        scratch = folder / "scratch"
        scratch.mkdir(parents=True)
        made.append(base_archive(recipe_for("debian-bookworm", root), scratch, quiet))
    (first, first_id), (second, second_id) = made
    assert first_id == second_id, describe_difference(first, second)
    with tarfile.open(first) as archive:
        manifest = json.loads(archive.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(archive.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
    labels = config["config"]["Labels"]
    assert config["created"] == labels["org.opencontainers.image.created"] == "2026-01-01T00:00:00Z"
    lock = read_lock(REPO / "learner_base" / "lock" / "debian-bookworm.json")
    assert sorted(labels["io.learnerkit.base.packages"].split(",")) == lock.dpkg_list().split()
