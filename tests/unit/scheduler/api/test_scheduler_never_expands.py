"""The scheduler reads a manifest as it arrives: a `${NAME}` in it is never filled from the scheduler's own
environment (a tenant must not read the scheduler's variables); it is refused as any text that is not a value."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.core.test_sweep_evaluations import scheduler
from tests.unit.scheduler.fakefacade import MANIFEST

SCHEDULER_ENV = {"S3_ENDPOINT_URL": "http://127.0.0.1:8333", "LEARNERKIT_SECRET_OF_THE_SCHEDULER": "do-not-leak"}


@pytest.fixture
def client(tenants: Tenants, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    for name, value in SCHEDULER_ENV.items():
        monkeypatch.setenv(name, value)
    built, _store = scheduler()
    with TestClient(create_app(built, tenants.path)) as test_client:
        yield test_client


def test_a_reference_reaching_the_api_is_refused_as_written(client: TestClient, tenants: Tenants) -> None:
    text = (
        MANIFEST.format(gpus=0)
        .replace("gpu_type: nvidia-a100\n", "")
        .replace("http://127.0.0.1:8333", "${S3_ENDPOINT_URL}")
        .replace("password: secret", "password: ${LEARNERKIT_SECRET_OF_THE_SCHEDULER}")
    )
    answer = client.post(
        "/v1/jobs", json={"manifest": text, "source": "mine.yml"}, headers={"Authorization": f"Bearer {tenants.a}"}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["problems"] == [
        {
            "file": "mine.yml",
            "line": 14,
            "field": "data_stores[0].connection.auth_url",
            "message": "'${S3_ENDPOINT_URL}' is not an http(s) URL of the object store endpoint",
        }
    ]
    assert not any(value in answer.text for value in SCHEDULER_ENV.values())
