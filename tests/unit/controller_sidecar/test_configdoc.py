"""The sidecar's config document: what a host writes with ``to_raw`` is what the sidecar reads back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from controller_sidecar.configdoc import SidecarConfigDocument, StoreFolder, StoreObject, TimingDocument
from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.requirements import PackageIndex
from controller_sidecar.settings import SidecarSettings, Timing, load_settings

ENV = {"JOB_ID": "job-1", "LEARNER_ID": "1", "ETCD_ENDPOINTS": "127.0.0.1:2379"}


def read_back(raw: Mapping[str, Any]) -> SidecarSettings:
    return load_settings({**ENV, "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(raw)})


def test_every_field_reaches_the_sidecar() -> None:
    index = PackageIndex("http://idx.local/simple", ("http://more.local/simple",), ("idx.local",), "3.11")
    document = SidecarConfigDocument(
        results=StoreFolder("results", "job-1/attempt-1/learner-1/"),
        data=StoreFolder("training-data", "mnist/"),
        model=StoreObject("results", "job-1/model/model.zip"),
        resume_from=StoreFolder("results", "job-1/attempt-0/learner-1/checkpoints/"),
        timing=TimingDocument(halt_grace_s=12.0, checkpoint_interval_s=60.0, log_ship_interval_s=2.0),
        evaluation_metrics={"type": "tensorboard"},
        requirements=index,
        metrics_port=9200,
        status_sequence_start=41,
        etcd_root="/team/jobs",
        held_attempt=3,
    )
    settings = read_back(document.to_raw())
    locations = settings.locations
    assert (locations.results.bucket, locations.results.prefix) == ("results", "job-1/attempt-1/learner-1/")
    assert locations.data_mode == "copy" and locations.data is not None
    assert (locations.data.bucket, locations.data.prefix) == ("training-data", "mnist/")
    assert locations.model is not None and locations.model.key("") == "job-1/model/model.zip"
    assert locations.resume_from is not None
    assert locations.resume_from.prefix == "job-1/attempt-0/learner-1/checkpoints/"
    timing = settings.timing
    assert (timing.halt_grace_s, timing.checkpoint_interval_s, timing.log_ship_interval_s) == (12.0, 60.0, 2.0)
    assert settings.evaluation_metrics == {"type": "tensorboard"}
    assert settings.requirements == index
    assert (settings.metrics_port, settings.status_sequence_start, settings.etcd.root) == (9200, 41, "/team/jobs")
    assert settings.held_attempt == 3


def test_what_is_left_out_keeps_the_sidecars_defaults() -> None:
    raw = SidecarConfigDocument(results=StoreFolder("results")).to_raw()
    assert raw == {"results": {"bucket": "results", "prefix": ""}, "data": {"mode": "mount"}, "timing": {}}
    settings = read_back(raw)
    defaults = SidecarSettings(
        job_id="job-1", learner_id=1, locations=settings.locations, etcd=settings.etcd, s3=settings.s3
    )
    assert settings == defaults
    assert settings.locations.data_mode == "mount" and settings.timing == Timing()


def test_an_evaluation_reads_a_trained_model_folder_not_an_archive() -> None:
    document = SidecarConfigDocument(
        results=StoreFolder("results", "job-1/evaluations/round-1/robust/"),
        trained_model=StoreFolder("results", "job-1/attempt-1/learner-1/results/model"),
    )
    trained = read_back(document.to_raw()).locations.trained_model
    assert trained is not None and (trained.bucket, trained.prefix) == (
        "results",
        "job-1/attempt-1/learner-1/results/model/",
    )


def test_a_model_archive_and_a_trained_model_are_refused_together() -> None:
    raw = SidecarConfigDocument(
        results=StoreFolder("results", "job-1/"),
        model=StoreObject("results", "job-1/model/model.zip"),
        trained_model=StoreFolder("results", "job-1/attempt-1/learner-1/results/model/"),
    ).to_raw()
    with pytest.raises(SidecarConfigError, match="model and trained_model"):
        read_back(raw)
