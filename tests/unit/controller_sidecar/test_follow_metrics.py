"""Following the learner's metrics: the last values reach etcd even when etcd is away at the end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path

from controller_sidecar.errors import TransientError
from controller_sidecar.evalmetrics import MetricsParser
from controller_sidecar.processing import follow_metrics
from controller_sidecar.prom import SidecarMetrics
from controller_sidecar.settings import load_settings
from tests.fakeclock import FakeClock

ENV = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}


def test_the_last_metrics_are_retried_until_etcd_takes_them(tmp_path: Path) -> None:
    doc = {"job_id": "job-1", "learner_id": 1, "results": {"bucket": "results"}, "data": {"mode": "mount"}}
    doc["job_dir"] = str(tmp_path)
    settings = load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(doc)})
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.jsonl").write_text('{"step": 9, "time": 1.0, "values": {"loss": 0.5}}\n')
    clock = FakeClock()
    attempts: list[dict[str, float]] = []

    async def publish(values: Mapping[str, float]) -> None:
        attempts.append(dict(values))
        if len(attempts) <= 3:
            raise TransientError("etcd did not answer")

    async def scenario() -> None:
        stop = asyncio.Event()
        stop.set()  # the learner has exited: this is the last publish
        metrics = SidecarMetrics("job-1", 1)
        await follow_metrics(settings, MetricsParser(None), metrics, publish, stop, clock=clock)

    asyncio.run(scenario())
    assert attempts == [{"loss": 0.5}] * 4
    assert len(clock.sleeps) == 3
