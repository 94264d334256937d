"""Image tiers: a named subset of the matrix from image-tiers.yaml, `full` always every image; bad files named."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit_build.errors import SpecError
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.tiers import TIERS_FILE, load_tier
from tests.unit.conftest import REPO, MakeProject


def names(images: list) -> list[str]:  # type: ignore[type-arg]
    return [image.name for image in images]


def write_tiers(root: Path, text: str) -> None:
    (root / TIERS_FILE).write_text(text, encoding="utf-8")


def test_a_tier_holds_its_variants_and_its_named_images(make_project: MakeProject) -> None:
    root = make_project()
    write_tiers(root, "quick:\n  variants: [cpu]\n")
    matrix = load_matrix(root)
    assert names(matrix.select([], tier=load_tier(root, "quick"))) == ["toy:1.0-cpu"]
    write_tiers(root, "quick:\n  images: [toy:1.0-cuda]\n")
    assert names(matrix.select([], tier=load_tier(root, "quick"))) == ["toy:1.0-cuda"]


def test_full_is_every_image_without_an_entry(make_project: MakeProject) -> None:
    root = make_project()
    matrix = load_matrix(root)
    assert names(matrix.select([], tier=load_tier(root, "full"))) == names(list(matrix.images))


def test_an_unknown_tier_lists_the_tiers(make_project: MakeProject) -> None:
    root = make_project()
    write_tiers(root, "quick:\n  variants: [cpu]\n")
    with pytest.raises(SpecError, match=r"no tier 'slow'; tiers: full, quick"):
        load_tier(root, "slow")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("quick:\n  variant: [cpu]\n", r"image-tiers.yaml:2: quick: unknown key 'variant'; valid keys: variants"),
        ("quick:\n  images: mxnet\n", r"image-tiers.yaml:2: quick.images: expected a list of strings"),
        ("quick: [cpu]\n", r"image-tiers.yaml:1: quick: a tier is a mapping"),
    ],
)
def test_a_bad_tiers_file_is_named_with_its_line_and_field(make_project: MakeProject, text: str, message: str) -> None:
    root = make_project()
    write_tiers(root, text)
    with pytest.raises(SpecError, match=message):
        load_tier(root, "quick")


def test_a_tier_naming_an_image_the_matrix_lacks_is_refused(make_project: MakeProject) -> None:
    root = make_project()
    write_tiers(root, "quick:\n  images: [toy:9.9-cpu]\n")
    with pytest.raises(SpecError, match=r"tier 'quick' names 'toy:9.9-cpu', which is not in the matrix"):
        load_matrix(root).select([], tier=load_tier(root, "quick"))


def test_the_project_test_tier_keeps_every_cpu_image_and_at_least_one_cuda_image() -> None:
    matrix = load_matrix(REPO)
    chosen = matrix.select([], tier=load_tier(REPO, "test"))
    assert {image.name for image in matrix.images if image.variant_name == "cpu"} <= set(names(chosen))
    assert any(image.variant.cuda for image in chosen)
