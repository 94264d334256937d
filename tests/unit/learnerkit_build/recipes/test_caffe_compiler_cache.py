"""Caffe's compile goes through ccache, whose cache is a BuildKit cache mount named after the Caffe version and
variant, in the builder stage only; ccache itself comes from the lock's builder section like every other .deb there.
That the mount survives the build tool's prune is tests/integration/learnerkit_build/test_compiler_cache.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from learnerkit_build.lock.committed import image_lock
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs, render_dockerfile
from learnerkit_build.recipes.spec import ImageSpec

REPO = Path(__file__).resolve().parents[4]
CACHE_MOUNT = re.compile(r"--mount=type=cache,id=([\w.-]+),target=(\S+)")


def caffe(spec: str) -> ImageSpec:
    [image] = load_matrix(REPO).select([spec])
    return image


def compile_step(text: str) -> str:
    """The one RUN of the builder stage that runs cmake."""
    [step] = [run for run in text.split("\nRUN ") if "cmake --build" in run]
    return step


@pytest.mark.parametrize("locked", [True, False])
@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_the_compile_runs_every_compiler_through_ccache_on_a_cache_of_its_version_and_variant(
    variant: str, locked: bool
) -> None:
    text = render_dockerfile(REPO, caffe(f"caffe:1.0-{variant}"), "example/base:1", BuildInputs(), locked=locked)
    builder, learner = text[: text.rindex("\nFROM ")], text[text.rindex("\nFROM ") :]
    step = compile_step(builder)
    assert CACHE_MOUNT.findall(step) == [(f"learnerkit-ccache-caffe-1.0-{variant}", "/root/.cache/ccache")]
    assert "type=cache" not in learner and "ccache" not in learner
    for setting in ("CCACHE_DIR=/root/.cache/ccache", "CCACHE_MAXSIZE=1G", "CCACHE_COMPILERCHECK=content"):
        assert setting in step, setting
    assert "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" in step
    # the stats land in the build's log: hits and misses of each compile
    assert step.index("ccache --zero-stats") < step.index("cmake --build") < step.index("ccache --show-stats")
    nvcc = "printf '#!/bin/sh\\nexec ccache /opt/cuda/bin/nvcc \"$@\"\\n' > /usr/local/bin/nvcc-ccache"
    assert (nvcc in step) == (variant == "cuda")
    assert ("CUDA_NVCC_EXECUTABLE=/usr/local/bin/nvcc-ccache" in step) == (variant == "cuda")
    assert ("CCACHE_EXTRAFILES=/opt/cuda/nvvm/bin/cicc:/opt/cuda/bin/ptxas" in step) == (variant == "cuda")
    assert step.index("export CCACHE_DIR") < step.index("cmake -S")
    if locked:
        assert step.index("export SOURCE_DATE_EPOCH=") < step.index("cmake -S")


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_ccache_comes_from_the_committed_lock_of_the_builder(variant: str) -> None:
    image = caffe(f"caffe:1.0-{variant}")
    assert image.variant.builder is not None and "ccache" in image.variant.builder.apt
    lock = image_lock(image)  # refuses a lock that lacks a package framework.yaml's builder installs
    assert lock is not None and lock.builder is not None
    [deb] = [deb for deb in lock.builder.debian if deb.package == "ccache"]
    assert deb.version.startswith("4.") and re.fullmatch(r"[0-9a-f]{64}", deb.sha256)


def test_the_cpu_and_cuda_compiles_never_share_a_cache() -> None:
    ids = {
        CACHE_MOUNT.findall(compile_step(render_dockerfile(REPO, caffe(spec), "example/base:1", BuildInputs())))[0][0]
        for spec in ("caffe:1.0-cpu", "caffe:1.0-cuda")
    }
    assert len(ids) == 2
