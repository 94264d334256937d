"""Selecting images from the matrix by spec, and the errors for specs that match nothing."""

from __future__ import annotations

import pytest

from learnerkit_build.errors import SpecError
from learnerkit_build.matrix import load_matrix
from tests.unit.conftest import MakeProject


def names(images: list) -> list[str]:  # type: ignore[type-arg]
    return [image.name for image in images]


def test_selectors_by_framework_version_variant_and_full_tag(make_project: MakeProject) -> None:
    matrix = load_matrix(make_project())
    assert names(matrix.select(["toy"])) == ["toy:1.0-cpu", "toy:1.0-cuda"]
    assert names(matrix.select(["toy:1.0"])) == ["toy:1.0-cpu", "toy:1.0-cuda"]
    assert names(matrix.select(["toy:1.0-cuda"])) == ["toy:1.0-cuda"]
    assert names(matrix.select(["toy:1.0-cpu-py3.11"])) == ["toy:1.0-cpu"]
    assert names(matrix.select([], select_all=True, variants=["cpu"])) == ["toy:1.0-cpu"]


def test_image_names_follow_the_design(make_project: MakeProject) -> None:
    image = load_matrix(make_project()).select(["toy:1.0-cpu"])[0]
    assert image.tag == "1.0-cpu-py3.11"
    assert image.repository() == "learnerkit/toy"
    assert image.repository("registry.local:5000") == "registry.local:5000/learnerkit/toy"


def test_unknown_framework_lists_valid_ones(make_project: MakeProject) -> None:
    with pytest.raises(SpecError, match=r"unknown framework 'tensorflw'; valid: toy"):
        load_matrix(make_project()).select(["tensorflw:2.21-cpu"])


def test_unknown_variant_lists_valid_images(make_project: MakeProject) -> None:
    with pytest.raises(SpecError, match=r"no such version/variant of toy; valid: toy:1.0-cpu, toy:1.0-cuda"):
        load_matrix(make_project()).select(["toy:1.0-rocm"])


def test_nothing_selected_is_an_error(make_project: MakeProject) -> None:
    with pytest.raises(SpecError, match="--all"):
        load_matrix(make_project()).select([])


def test_malformed_spec_is_explained(make_project: MakeProject) -> None:
    with pytest.raises(SpecError, match=r"expected FRAMEWORK\[:VERSION\[-VARIANT\]\]"):
        load_matrix(make_project()).select(["Toy!"])
