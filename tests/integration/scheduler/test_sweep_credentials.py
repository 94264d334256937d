"""A sweep that ended keeps no store credentials in etcd: its record's manifest is redacted as an ended job's
is (`JobStore.delete_credentials`), on real etcd and the real scheduler service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.manifest.redact import REDACTED
from learnerkit.scheduler.sweeps.store import SweepSpecRecord, SweepState, SweepStatus
from tests.integration.scheduler.conftest import Harness, manifest
from tests.integration.scheduler.test_sweeps import SEARCH, model_zip

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]


async def chunks(path: Path) -> AsyncIterator[bytes]:
    yield path.read_bytes()


def stored_spec(harness: Harness, sweep_id: str) -> dict[str, Any]:
    driver = harness.service.loop.driver
    assert driver is not None
    found = harness.call(driver.store.etcd.get(f"{driver.store.root}/{sweep_id}/spec"))
    assert found is not None
    spec: dict[str, Any] = json.loads(found[0])
    return spec


def test_a_cancelled_sweep_s_record_keeps_no_credentials(
    harness: Harness, s3_server: Any, learner_image: str, tmp_path: Path
) -> None:
    text = manifest(s3_server, "python3 train.py --lr ${lr}")
    view = harness.call(
        harness.service.submit_sweep("team-a", SEARCH, text, image=learner_image, model=chunks(model_zip(tmp_path)))
    )
    assert s3_server.secret_key in stored_spec(harness, view.sweep_id)["manifest"]["text"]  # needed while it runs
    harness.call(harness.service.cancel_sweep("team-a", view.sweep_id))
    spec = stored_spec(harness, view.sweep_id)
    assert s3_server.secret_key not in json.dumps(spec)
    assert s3_server.access_key not in json.dumps(spec)
    assert spec["manifest"]["text"].count(REDACTED) == 2
    assert spec["credentials"] == "deleted"


def test_a_sweep_that_ended_before_its_credentials_were_deleted_loses_them_on_restart(
    etcd_server: Any, service_options: SchedulerOptions, s3_server: Any, scheduler_buckets: Any
) -> None:
    """A scheduler that stopped between the sweep's end and the redaction: the next one redacts at rebuild."""
    text = manifest(s3_server, "python3 train.py --lr ${lr}")
    first = Harness(etcd_server, service_options)
    try:
        driver = first.service.loop.driver
        assert driver is not None
        record = SweepSpecRecord("sweep-ended0", "team-a", 0.0, SEARCH, "search.yml", text, "manifest.yml")
        assert first.call(driver.store.create(record))
        first.call(driver.store.record(record.sweep_id, SweepState(SweepStatus.DONE), [], []))
    finally:
        first.kill()
    second = Harness(etcd_server, service_options)
    try:
        spec = stored_spec(second, "sweep-ended0")
        assert s3_server.secret_key not in json.dumps(spec)
        assert spec["credentials"] == "deleted"
        assert "sweep-ended0" in second.service.loop.driver.sweeps  # type: ignore[union-attr]
    finally:
        second.kill()
