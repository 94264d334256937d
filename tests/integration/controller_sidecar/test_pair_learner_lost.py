"""A learner that ends without learner-run's exit record still ends its job with a status: an image whose
entrypoint is not learner-run, built here from the learner base, through a real pair."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from typing import Any

import pytest

from controller_sidecar.status import ErrorCode, Phase
from learnerkit.common import engine
from tests.integration.controller_sidecar.conftest import Pairs

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

BASE_IMAGE = "learnerkit/base:debian-bookworm"
NO_LEARNER_RUN = "learnerkit-test/no-learner-run:latest"
DOCKERFILE = f"""
FROM {BASE_IMAGE}
RUN mkdir -p /job/data /job/model /job/results /job/checkpoints /job/logs /job/control \\
 && chown -R 1000:0 /job && chmod -R 0775 /job
USER 1000:0
ENTRYPOINT []
CMD ["/bin/sh"]
"""
LOST = "the learner ended without learner-run's exit record: is learner-run the image's entrypoint?"


@pytest.fixture(scope="module")
def no_learner_run_image(docker_client: Any) -> Iterator[str]:
    """The learner base with the /job folders of a learner image, and no learner-run; removed after the module."""
    if engine.image_id(BASE_IMAGE) is None:
        pytest.fail(f"{BASE_IMAGE} is not built: run `make images`")
    engine.engine().images.build(fileobj=io.BytesIO(DOCKERFILE.encode()), tag=NO_LEARNER_RUN, rm=True)
    yield NO_LEARNER_RUN
    docker_client.images.remove(NO_LEARNER_RUN)


@pytest.mark.parametrize(
    "command",
    [("sh", "-c", "echo ran without learner-run"), ("sh", "-c", "sleep 4; echo ran without learner-run")],
    ids=["exits-before-the-sidecar-watches", "exits-while-watched"],
)
def test_a_learner_image_without_learner_run_ends_failed_naming_the_cause(
    pairs: Pairs, no_learner_run_image: str, command: tuple[str, ...]
) -> None:
    spec = dataclasses.replace(pairs.spec(command, data_prefix=None), learner_image=no_learner_run_image)
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id, timeout=120)
    evidence = pairs.describe(handle, spec.job_id)
    assert (final.phase, final.error_code, final.message) == (Phase.FAILED, ErrorCode.LEARNER_LOST, LOST), evidence
