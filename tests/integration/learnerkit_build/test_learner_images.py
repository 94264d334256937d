"""Every learner image of the run's tier (tests/tiers.py), cpu and cuda: built (cached by `make test`), then
every contract check, the content checks (no CUDA in cpu images; the CUDA build of cuda images up to the driver;
every library of the framework resolving) and the smoke training with a halt in the middle and a resume to the
end. Without GPUs, a cuda image's training is a skip that says why; `image test --gpus` on such a host skips it
too, never passes."""

from __future__ import annotations

from typing import Any

import pytest

from learnerkit_build.builds.images import build_image
from learnerkit_build.imagetest.runner import CHECKS, run_image_tests
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.tiers import current_tier, tiered

IMAGES = load_matrix(REPO).images


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("image", tiered(IMAGES))
def test_image_passes_contract_and_smoke_training(image: Any, docker_client: Any, build_inputs: BuildInputs) -> None:
    result = build_image(REPO, image, build_inputs, lambda line: None)
    assert result.status in ("built", "cached")
    labels = docker_client.images.get(result.reference).labels
    assert labels["io.learnerkit.inputs-hash"] == result.inputs_hash
    assert labels["io.learnerkit.framework"] == image.framework.name
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert docker_client.images.get(result.immutable_reference).id == result.image_id

    if image.variant.cuda:
        assert labels["io.learnerkit.cuda"] == image.variant.cuda.version

    [report] = run_image_tests(REPO, [image], [], verbose=False)
    results = {check.name: check for check in report.checks}
    assert list(results) == list(CHECKS)
    on_gpu = image.variant.accelerator == "cuda"
    failed = {name: c.detail for name, c in results.items() if c.status != "pass" and not (on_gpu and name == "smoke")}
    assert not failed, failed
    if on_gpu:  # this host has no GPU: the training is skipped, and says why
        assert results["smoke"].status == "skip" and "GPU training not run" in results["smoke"].detail


def test_gpus_on_a_host_without_gpus_is_a_clear_skip_never_a_pass(docker_client: Any) -> None:
    if docker_client.info().get("Runtimes", {}).get("nvidia"):
        pytest.skip("this engine has the NVIDIA runtime: the skip is for hosts without GPUs")
    image = next(image for image in IMAGES if image.variant.cuda and current_tier().holds(image))
    [report] = run_image_tests(REPO, [image], ["smoke"], verbose=False, gpus=True)
    [smoke] = report.checks
    assert smoke.status == "skip", smoke
    assert smoke.detail.startswith("GPU training not run: --gpus asked for GPUs, but the engine gives no GPUs")
