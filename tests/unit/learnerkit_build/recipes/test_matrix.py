"""Selecting images from the matrix by spec, and the errors for specs that match nothing."""

from __future__ import annotations

import pytest

from learnerkit_build.errors import SpecError
from learnerkit_build.recipes.matrix import load_matrix
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


TWO_VERSIONS = """\
name: toy
description: a toy framework with two versions, one a prefix of the other
smoke:
  command: ["python", "/opt/learner/smoke/train.py"]
versions:
  "0.10":
    python: "3.11"
    variants:
      cpu: {accelerator: cpu, pip: {packages: ["six==1.17.0"]}}
  "0.1":
    python: "3.11"
    variants:
      cpu: {accelerator: cpu, pip: {packages: ["six==1.16.0"]}}
"""


def test_each_version_is_an_image_of_its_own_and_a_version_selects_only_itself(make_project: MakeProject) -> None:
    matrix = load_matrix(make_project(TWO_VERSIONS))
    assert names(matrix.select(["toy"])) == ["toy:0.10-cpu", "toy:0.1-cpu"]
    assert names(matrix.select(["toy:0.1"])) == ["toy:0.1-cpu"]
    assert names(matrix.select(["toy:0.10-cpu-py3.11", "toy:0.1-cpu"])) == ["toy:0.10-cpu", "toy:0.1-cpu"]
    assert [image.tag for image in matrix.images] == ["0.10-cpu-py3.11", "0.1-cpu-py3.11"]
    with pytest.raises(SpecError, match=r"no such version/variant of toy; valid: toy:0.10-cpu, toy:0.1-cpu"):
        matrix.select(["toy:0.9"])
