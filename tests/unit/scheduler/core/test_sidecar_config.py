"""What the scheduler tells each sidecar about the platform: the job store's etcd root goes with it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from controller_sidecar.settings import load_settings
from learnerkit.scheduler.core.planning import Platform, sidecar_config
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.core.test_learner_ended import MANIFEST


def test_sidecars_report_under_the_schedulers_etcd_root() -> None:
    state = JobState("job-1", "team-a", "j", datetime.now(UTC))
    platform = Platform("127.0.0.1:2379", "sidecar", etcd_root="/team-store/jobs")
    config = sidecar_config(parse_manifest(MANIFEST), state, 1, platform)
    environ = {
        "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps({**config, "job_id": "job-1", "learner_id": 1, "num_learners": 1}),
        "ETCD_ENDPOINTS": "127.0.0.1:2379",
    }
    assert load_settings(environ).etcd.root == "/team-store/jobs"
    assert sidecar_config(parse_manifest(MANIFEST), state, 1, Platform("e:2379", "s"))["etcd"]["root"] == (
        "/learnerkit/jobs"
    )
