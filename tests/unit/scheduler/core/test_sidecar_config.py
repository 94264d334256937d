"""What the hosts tell each sidecar: the scheduler's planning and ``sidecar run-local`` write the config
document deployed sidecars read, in its one shape."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.requirements import PackageIndex
from controller_sidecar.settings import SidecarSettings, load_settings
from learnerkit.pair.runlocal import LocalRun, pair_spec
from learnerkit.scheduler.core.planning import Platform, plan_job, sidecar_config
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.submission import ModelObject, SubmitOptions
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.core.test_learner_ended import MANIFEST


def read_back(raw: dict[str, Any]) -> SidecarSettings:
    document = json.dumps({**raw, "job_id": "job-1", "learner_id": 1, "num_learners": 1})
    return load_settings({"LEARNERKIT_SIDECAR_CONFIG_JSON": document, "ETCD_ENDPOINTS": "127.0.0.1:2379"})


def test_sidecars_report_under_the_schedulers_etcd_root() -> None:
    state = JobState("job-1", "team-a", "j", datetime.now(UTC))
    platform = Platform("127.0.0.1:2379", "sidecar", etcd_root="/team-store/jobs")
    config = sidecar_config(parse_manifest(MANIFEST), state, 1, platform)
    assert read_back(config.to_raw()).etcd.root == "/team-store/jobs"
    assert sidecar_config(parse_manifest(MANIFEST), state, 1, Platform("e:2379", "s")).etcd_root == "/learnerkit/jobs"


def test_a_planned_resume_with_model_code_keeps_the_documents_shape() -> None:
    state = replace(JobState("job-1", "team-a", "j", datetime.now(UTC)), attempt=2, resume_from_attempt=1)
    options = SubmitOptions(model=ModelObject("results", "job-1/model/model.zip", 10, requirements=True))
    index = PackageIndex("http://idx.local/simple", python_version="3.11")
    plan = plan_job(parse_manifest(MANIFEST), state, Platform("e:2379", "s"), "img:1", None, options, index)
    raw = dict(plan.learners[0].sidecar_config)
    assert raw == {
        "results": {"bucket": "results", "prefix": "job-1/attempt-2/learner-1/"},
        "data": {"mode": "copy", "bucket": "data", "prefix": ""},
        "timing": {"halt_grace_s": 10.0},
        "status_sequence_start": state.first_sequence,
        "metrics_port": 0,
        "etcd": {"root": "/learnerkit/jobs"},
        "resume_from": {"bucket": "results", "prefix": "job-1/attempt-1/learner-1/checkpoints/"},
        "model": {"bucket": "results", "key": "job-1/model/model.zip"},
        "requirements": {
            "index_url": "http://idx.local/simple",
            "extra_index_urls": [],
            "trusted_hosts": [],
            "python_version": "3.11",
        },
    }
    settings = read_back(raw)
    assert settings.locations.resume_from is not None and settings.requirements == index
    assert settings.status_sequence_start == state.first_sequence


def test_run_local_writes_the_same_document() -> None:
    run = LocalRun(
        "learner:1",
        "sidecar:1",
        ("true",),
        "s3://results/runs",
        Endpoints("127.0.0.1:2379"),
        data="s3://training-data/mnist/",
        model="s3://models/mnist.zip",
        job_id="local-1",
    )
    raw = dict(pair_spec(run).sidecar_config)
    assert raw == {
        "results": {"bucket": "results", "prefix": "runs/local-1/learner-1/"},
        "data": {"mode": "copy", "bucket": "training-data", "prefix": "mnist/"},
        "timing": {"halt_grace_s": 30.0, "checkpoint_interval_s": 300.0, "log_ship_interval_s": 2.0},
        "metrics_port": 0,
        "model": {"bucket": "models", "key": "mnist.zip"},
    }
    settings = read_back(raw)
    assert settings.locations.data is not None and settings.locations.data.bucket == "training-data"
    assert settings.timing.log_ship_interval_s == 2.0
