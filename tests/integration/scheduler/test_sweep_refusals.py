"""A sweep's manifest refused by the scheduler's policy is named by its own file, as a job's is."""

from __future__ import annotations

from typing import Any

import pytest

from learnerkit.scheduler.errors import ManifestError
from tests.integration.scheduler.conftest import Harness, manifest
from tests.integration.scheduler.test_sweeps import SEARCH

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(120)]


def test_a_policy_refusal_names_the_sweep_s_manifest_file(harness: Harness, s3_server: Any) -> None:
    text = manifest(s3_server, "python3 train.py --lr ${lr}").replace(s3_server.endpoint_url, "http://127.0.0.1:9")
    before = harness.call(harness.service.list_sweeps("team-a"))
    with pytest.raises(ManifestError) as refused:
        harness.call(harness.service.submit_sweep("team-a", SEARCH, text, manifest_source="experiments/digits.yml"))
    message = str(refused.value)
    assert message.startswith("experiments/digits.yml"), message
    assert "auth_url" in message, message
    assert harness.call(harness.service.list_sweeps("team-a")) == before  # nothing stored
