"""A sweep's store credentials lie apart from its records, as a job's do (``/learnerkit/credentials/sweeps/<id>``):
no key under the sweeps' prefix, nor any key the event hub watches, ever holds them; the key is gone once the sweep
ended; a sweep stored with them in its spec (the earlier layout) still runs on them, moved out at start. On real
etcd and the real scheduler service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar.etcdstore import EtcdStore, WatchEvent
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.events.source import watched_range
from learnerkit.scheduler.facade import SweepView
from learnerkit.scheduler.manifest.redact import REDACTED
from learnerkit.scheduler.sweeps.store import SweepSpecRecord, SweepState, SweepStatus
from tests.integration.scheduler.conftest import TERMINAL, Harness, leftovers, manifest
from tests.integration.scheduler.test_sweeps import SEARCH, model_zip
from tests.waiting import wait_until

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


def credentials_key(sweep_id: str) -> str:
    """Where a sweep's credentials lie (docs/architecture.md), beside the jobs' ``/learnerkit/credentials/<job>``."""
    return f"/learnerkit/credentials/sweeps/{sweep_id}"


def etcd_of(harness: Harness) -> EtcdStore:
    return harness.service.shared.store.etcd


async def changes_until(etcd: EtcdStore, first: str, end: str, start: int, marker: str) -> list[WatchEvent]:
    """Every change in [first, end) from revision ``start`` (replayed from etcd's history) up to ``marker``'s."""
    seen: list[WatchEvent] = []
    async for event in etcd.watch_range(first, end, start_revision=start):
        if event.key == marker:
            return seen
        seen.append(event)
    raise AssertionError("the watch ended before the marker")


def test_no_watched_key_ever_holds_a_sweep_s_credentials_and_their_key_goes_with_its_end(
    harness: Harness, s3_server: Any, learner_image: str, tmp_path: Path
) -> None:
    etcd = etcd_of(harness)
    secret = s3_server.secret_key.encode()
    start = harness.call(etcd.put("/learnerkit-test/sweep-credentials-start", "1"))
    text = manifest(s3_server, "python3 train.py --lr ${lr}")
    view = harness.call(
        harness.service.submit_sweep("team-a", SEARCH, text, image=learner_image, model=chunks(model_zip(tmp_path)))
    )
    held = harness.call(etcd.get(credentials_key(view.sweep_id)))
    assert held is not None and secret in held[0]  # needed while it runs

    def sweep() -> SweepView:
        return harness.call(harness.service.get_sweep("team-a", view.sweep_id))

    def training() -> bool:
        return any(trial.job_status == "PROCESSING" for trial in sweep().trials)

    def trials_gone() -> bool:
        trials = sweep().trials
        return all(t.job_status in TERMINAL and leftovers(t.job_id) == [] for t in trials)

    wait_until(training, timeout=180, interval=0.2, message="a trial to train")
    harness.call(harness.service.cancel_sweep("team-a", view.sweep_id))
    wait_until(trials_gone, timeout=180, interval=0.2, message=lambda: f"the trials to end and go: {sweep().trials}")
    assert harness.call(etcd.get(credentials_key(view.sweep_id))) is None
    first, end = watched_range(harness.root)
    marker = f"{harness.service.loop.driver.store.root}/{view.sweep_id}/test-end"  # type: ignore[union-attr]
    harness.call(etcd.put(marker, "1"))
    changes = harness.call(changes_until(etcd, first, end, start + 1, marker))
    assert any(view.sweep_id in change.key for change in changes)  # the replay saw the sweep's life
    assert [c.key for c in changes if c.value is not None and secret in c.value] == []
    now = harness.call(etcd.get_prefix(harness.root.rsplit("/", 1)[0] + "/"))  # ``/learnerkit/``
    assert [key for key, value in now.items() if first <= key < end and secret in value] == []
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
        assert second.call(etcd_of(second).get(credentials_key("sweep-ended0"))) is None
        assert "sweep-ended0" in second.service.loop.driver.sweeps  # type: ignore[union-attr]
    finally:
        second.kill()


def test_a_sweep_stored_with_credentials_in_its_spec_runs_on_them_moved_out_at_start(
    etcd_server: Any, service_options: SchedulerOptions, s3_server: Any, scheduler_buckets: Any
) -> None:
    """The layout before the credentials' own key: the next scheduler reads them from the spec and moves them."""
    text = manifest(s3_server, "python3 train.py --lr ${lr}")
    first = Harness(etcd_server, service_options)
    try:
        driver = first.service.loop.driver
        assert driver is not None
        record = SweepSpecRecord("sweep-legacy0", "team-a", 0.0, SEARCH, "search.yml", text, "manifest.yml")
        prefix = f"{driver.store.root}/{record.sweep_id}/"
        halted = SweepState(SweepStatus.HALTED)  # starts no trial: the test runs no container
        first.call(etcd_of(first).put(f"{prefix}spec", json.dumps(record.to_raw())))
        first.call(etcd_of(first).put(f"{prefix}state", json.dumps(halted.to_raw())))
    finally:
        first.kill()
    second = Harness(etcd_server, service_options)
    try:
        restored = second.service.loop.driver.sweeps["sweep-legacy0"]  # type: ignore[union-attr]
        assert restored.record.manifest_text == text  # its trials run with the credentials
        spec = stored_spec(second, "sweep-legacy0")
        assert s3_server.secret_key not in json.dumps(spec)
        held = second.call(etcd_of(second).get(credentials_key("sweep-legacy0")))
        assert held is not None and json.loads(held[0])["manifest"] == text
    finally:
        second.kill()
