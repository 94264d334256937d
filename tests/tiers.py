"""The image tier a test run covers: `LEARNERKIT_IMAGE_TIER` (`make test` sets `test`, `make test-full` sets
`full`; unset means `test`). An image outside it is a skip naming the tier and the target that tests it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest

from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.spec import ImageSpec
from learnerkit_build.recipes.tiers import Tier, load_tier
from tests.integration.conftest import REPO

TIER_VARIABLE = "LEARNERKIT_IMAGE_TIER"


def current_tier() -> Tier:
    return load_tier(REPO, os.environ.get(TIER_VARIABLE) or "test")


def tiered(images: Iterable[ImageSpec]) -> list[Any]:
    """Parameters for `images`, those outside this run's tier marked as skips that say why."""
    tier = current_tier()
    return [
        pytest.param(image, id=image.name)
        if tier.holds(image)
        else pytest.param(
            image,
            id=image.name,
            marks=pytest.mark.skip(reason=f"{image.name} is outside the {tier.name!r} image tier: make test-full"),
        )
        for image in images
    ]


def tiered_specs(specs: Iterable[str]) -> list[Any]:
    """`tiered` for image specs (`mxnet:1.9.1-cuda`), each parameter its spec."""
    matrix = load_matrix(REPO)
    return [
        pytest.param(spec, id=spec, marks=param.marks)
        for spec, param in zip(specs, tiered(matrix.select([spec])[0] for spec in specs), strict=True)
    ]
