"""A job's requirements may not replace the learner image's locked packages: submit refuses one that would, naming
the line and both versions, and stores nothing. Real etcd and SeaweedFS, the project's committed locks; no pair is
deployed, so no sidecar image is needed."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.errors import ModelCodeError
from learnerkit.scheduler.images.catalog import ImageCatalog
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import Harness, manifest
from tests.integration.scheduler.test_model_code import chunks, model_objects

pytestmark = [pytest.mark.integration, pytest.mark.services]


@pytest.fixture
def locked_harness(etcd_server: Any, s3_server: Any, scheduler_buckets: Any) -> Iterator[Harness]:
    catalog = ImageCatalog(REPO)
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="learnerkit/sidecar:never-deployed"),
        catalog=catalog.frameworks(),
        resolve_image=catalog.resolve,
        locked_of=catalog.locked_of,
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    made = Harness(etcd_server, options)
    yield made
    made.kill()


def test_submit_refuses_a_requirement_on_another_torch_naming_both_versions(
    locked_harness: Harness, s3_server: Any, scheduler_buckets: Any, tmp_path: Path
) -> None:
    lock = json.loads((REPO / "frameworks/pytorch/lock/2.13-cpu.json").read_text())
    [torch] = [wheel["version"] for wheel in lock["python"] if wheel["name"] == "torch"]
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("train.py", "import tabulate, torch\n")
        zf.writestr("requirements.txt", "tabulate==0.9.0\ntorch==2.0.0\n")
    before_jobs = locked_harness.call(locked_harness.service.list_jobs("team-a"))
    before_objects = model_objects(scheduler_buckets)
    submitted = locked_harness.service.submit("team-a", manifest(s3_server, "python train.py"), model=chunks(archive))
    with pytest.raises(ModelCodeError) as refused:
        locked_harness.call(submitted)
    assert f"requirements.txt line 2: torch==2.0.0 would replace the image's locked torch {torch}" in str(refused.value)
    assert locked_harness.call(locked_harness.service.list_jobs("team-a")) == before_jobs
    assert model_objects(scheduler_buckets) == before_objects
