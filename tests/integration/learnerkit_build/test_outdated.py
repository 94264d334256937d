"""`learnerkit image outdated`: an image whose base moved on is reported, one built on today's base is not."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import BASE_REPOSITORY
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.scan.outdated import base_reasons, check_image
from learnerkit_build.scan.sbom import BASE_DIGEST_LABEL, BASE_LABEL
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

PYTORCH = next(image for image in load_matrix(REPO).images if image.name == "pytorch:2.13-cpu")
STALE = "learnerkit-test/stale-base:1"


@pytest.fixture
def stale_image(docker_client: Any) -> Iterator[str]:
    """An image whose labels say it was built on a base that is no longer the current one."""
    base = f"{BASE_REPOSITORY}:debian-bookworm"
    dockerfile = f"FROM {base}\nLABEL {BASE_LABEL}={base} {BASE_DIGEST_LABEL}=sha256:{'0' * 64}\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=STALE, rm=True)
    yield STALE
    docker_client.images.remove(STALE, force=True)


def test_an_image_built_on_an_older_base_is_reported(stale_image: str) -> None:
    [reason] = base_reasons(stale_image)
    assert reason.startswith(f"base {BASE_REPOSITORY}:debian-bookworm is now sha256:")
    assert "built on sha256:0000" in reason


def test_a_learner_image_on_todays_base_has_no_base_reason(docker_client: Any) -> None:
    if engine.image_id(f"{PYTORCH.repository()}:{PYTORCH.tag}") is None:
        pytest.fail("the PyTorch learner image is not built: run `make images`")
    found = check_image(PYTORCH)
    assert found is not None and found.reference == f"{PYTORCH.repository()}:{PYTORCH.tag}"
    assert not [reason for reason in found.reasons if reason.startswith(("base ", "a newer base", "no base"))]
    assert all(reason.startswith(("security update ", "pending security updates unknown")) for reason in found.reasons)
