"""`image build`'s preparation (no engine): only the images that will build fill the lock cache."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from learnerkit_build import cli_options
from learnerkit_build.builds.images import BuildPlan, BuildResult
from learnerkit_build.builds.prefetch import FillReport
from learnerkit_build.recipes.render import BuildInputs

REPORT = FillReport(1, 0, 0, 1, 10, 0, 0, 0, 0.1, 0.1, 0.2)


@pytest.fixture
def matrix(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Three images; `built:1-cpu` exists under its inputs hash, `skipped:1-cuda` has no base on this engine."""
    monkeypatch.setenv("LEARNERKIT_HOME", "/nonexistent-learnerkit-home")
    images = [SimpleNamespace(name=n, local_base=None) for n in ("new:1-cpu", "built:1-cpu", "skipped:1-cuda")]

    def plan(root: Path, image: Any, inputs: BuildInputs, on_line: object) -> BuildPlan | BuildResult:
        if image.name == "skipped:1-cuda":
            return BuildResult(image.name, "skipped", f"learnerkit/{image.name}")
        return BuildPlan(image.name, "learnerkit/x", image.name, "FROM scratch\n", [], "scratch", "sha256:base")

    def cached(root: Path, plan: BuildPlan, digest: str, **kwargs: object) -> BuildResult | None:
        return BuildResult(plan.name, "cached", plan.repository) if plan.name == "built:1-cpu" else None

    monkeypatch.setattr(cli_options, "plan_image", plan)
    monkeypatch.setattr(cli_options, "plan_digest", lambda plan, inputs: f"digest-of-{plan.name}")
    monkeypatch.setattr(cli_options, "cached_result", cached)
    return images


def test_only_the_images_that_will_build_fill_the_cache(
    matrix: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    filled: list[list[str]] = []

    def fill(root: Path, images: list[Any], inputs: BuildInputs, **kwargs: object) -> FillReport:
        filled.append([image.name for image in images])
        return REPORT

    monkeypatch.setattr("learnerkit_build.builds.prefetch.fill_selection", fill)
    planned, report = cli_options.prepare_builds(
        tmp_path, matrix, BuildInputs(), rebuild=False, record_size=False, downloads=2, output="json"
    )
    assert filled == [["new:1-cpu"]] and report is REPORT
    assert [name for name, _ in planned] == ["new:1-cpu", "built:1-cpu", "skipped:1-cuda"]  # the order asked
    statuses = [item.status if isinstance(item, BuildResult) else "to build" for _, item in planned]
    assert statuses == ["to build", "cached", "skipped"]

    filled.clear()
    planned, _ = cli_options.prepare_builds(
        tmp_path, matrix, BuildInputs(), rebuild=True, record_size=False, downloads=2, output="json"
    )
    assert filled == [["new:1-cpu", "built:1-cpu"]]  # --rebuild builds it again, so its files are needed


def test_a_selection_already_built_neither_plans_nor_imports_a_fill(
    matrix: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "learnerkit_build.builds.prefetch", None)  # importing it raises ImportError
    built = [image for image in matrix if image.name != "new:1-cpu"]
    planned, report = cli_options.prepare_builds(
        tmp_path, built, BuildInputs(), rebuild=False, record_size=False, downloads=2, output="json"
    )
    assert report is None
    assert all(isinstance(item, BuildResult) for _, item in planned)
