"""Bit-identical rebuilds: a locked image built twice without BuildKit's cache, from two checkouts in
different folders (the second with umask-077 modes and another time zone), has one image ID.

Cost: two cold builds each of the sidecar and mxnet:1.9.1-cpu on the existing base, about 4 minutes on 2 cores.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from learnerkit.common import engine
from learnerkit_build.images import BuildResult, build_image
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
