"""Every CPU learner image of the matrix: built (cached by `make test`), then every contract check and the
smoke training with a halt in the middle and a resume to the end."""

from __future__ import annotations

from typing import Any

import pytest

from learnerkit_build.images import build_image
from learnerkit_build.imagetest import CHECKS, run_image_tests
from learnerkit_build.matrix import load_matrix
from learnerkit_build.render import BuildInputs
from tests.integration.conftest import REPO

CPU_IMAGES = [image for image in load_matrix(REPO).images if image.variant.accelerator == "cpu"]


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("image", CPU_IMAGES, ids=lambda image: image.name)
def test_image_passes_contract_and_smoke_training(image: Any, docker_client: Any, build_inputs: BuildInputs) -> None:
    result = build_image(REPO, image, build_inputs, lambda line: None)
    assert result.status in ("built", "cached")
    labels = docker_client.images.get(result.reference).labels
    assert labels["io.learnerkit.inputs-hash"] == result.inputs_hash
    assert labels["io.learnerkit.framework"] == image.framework.name
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert docker_client.images.get(result.immutable_reference).id == result.image_id

    [report] = run_image_tests(REPO, [image], [], verbose=False)
    failed = {check.name: check.detail for check in report.checks if check.status != "pass"}
    assert not failed, failed
    assert [check.name for check in report.checks] == list(CHECKS)
