"""A job's model code on the Docker backend: a folder or a zip stored with the job, expanded into MODEL_DIR, the
command run there as FfDL ran it, requirements installed by the sidecar from an index served here (the learner
stays offline), and every refused model leaving nothing behind. Real etcd, SeaweedFS and learner pairs."""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar.requirements import PackageIndex
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.errors import ManifestError, ModelCodeError
from learnerkit.scheduler.modelcode.archive import model_archive
from tests.integration.scheduler.conftest import RESULTS_BUCKET, TERMINAL, Harness, leftovers, manifest
from tests.pyindex import build_wheel, serve_index, write_index

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

TRAIN = """\
import json, os, sys
import helpers.words
out = {
    "cwd": os.getcwd(),
    "argv": sys.argv[1:],
    "word": helpers.words.WORD,
    "model_dir": os.environ["MODEL_DIR"],
}
try:
    import lkgreet
    out["greeting"] = lkgreet.hello()
except ImportError as e:
    out["greeting"] = str(e)
try:
    import urllib.request
    urllib.request.urlopen(sys.argv[-1], timeout=3)
    out["network"] = "reached"
except OSError:
    out["network"] = "none"
with open(os.path.join(os.environ["RESULT_DIR"], "out.json"), "w") as f:
    json.dump(out, f)
"""


@pytest.fixture(scope="module")
def index_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("index")
    wheel = build_wheel(root, "lkgreet", "1.0", {"lkgreet.py": "def hello():\n    return 'hello from lkgreet'\n"})
    write_index(root / "served", [wheel])
    with serve_index(root / "served") as url:
        yield url


@pytest.fixture
def code_harness(
    etcd_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any, index_url: str
) -> Iterator[Harness]:
    made = Harness(etcd_server, replace(service_options, packages=PackageIndex(index_url=index_url)))
    yield made
    made.kill()


def model_folder(root: Path, requirements: str | None) -> Path:
    folder = root / "model"
    (folder / "helpers").mkdir(parents=True)
    (folder / "train.py").write_text(TRAIN)
    (folder / "helpers" / "__init__.py").write_text("")
    (folder / "helpers" / "words.py").write_text("WORD = 'from the model code'\n")
    if requirements is not None:
        (folder / "requirements.txt").write_text(requirements)
    return folder


async def chunks(path: Path) -> AsyncIterator[bytes]:
    """The model as the API hands it on: its bytes in pieces, as they arrive."""
    with path.open("rb") as stream:
        while chunk := stream.read(256 * 1024):
            yield chunk


def stored(client: Any, key: str) -> bytes:
    return bytes(client.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read())


def model_objects(client: Any) -> list[str]:
    """Stored model archives and unfinished uploads of any."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=RESULTS_BUCKET)
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    unfinished = client.list_multipart_uploads(Bucket=RESULTS_BUCKET).get("Uploads", [])
    keys += [f"unfinished:{item['Key']}" for item in unfinished]
    return sorted(key for key in keys if key.endswith("/model/model.zip"))


def test_a_model_folder_runs_in_model_dir_with_its_requirements_offline(
    code_harness: Harness,
    s3_server: Any,
    scheduler_buckets: Any,
    learner_image: str,
    index_url: str,
    tmp_path: Path,
) -> None:
    archive = model_archive(model_folder(tmp_path, "lkgreet==1.0\n"), tmp_path)
    command = f"python3 train.py --arg x {index_url}/lkgreet/"
    view = code_harness.call(
        code_harness.service.submit("team-a", manifest(s3_server, command), image=learner_image, model=chunks(archive))
    )
    final = code_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "COMPLETED", final
    out = json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-1/results/out.json"))
    assert out == {
        "cwd": "/job/model",
        "argv": ["--arg", "x", f"{index_url}/lkgreet/"],
        "word": "from the model code",
        "model_dir": "/job/model",
        "greeting": "hello from lkgreet",
        "network": "none",
    }
    assert stored(scheduler_buckets, f"{view.job_id}/model/model.zip") == archive.read_bytes()
    assert leftovers(view.job_id) == []


def test_a_model_zip_with_an_unknown_requirement_fails_in_downloading_naming_it_in_one_line(
    code_harness: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    folder = model_folder(tmp_path, "lkgreet==1.0\nno-such-package-anywhere==1.0\n")
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder).as_posix())
    view = code_harness.call(
        code_harness.service.submit(
            "team-a", manifest(s3_server, "python3 train.py"), image=learner_image, model=chunks(archive)
        )
    )
    final = code_harness.wait_status("team-a", view.job_id, TERMINAL)
    assert final.status == "FAILED", final
    message = final.learners[0].message
    # One line naming the requirement and the cause; pip's whole output is in the sidecar's log.
    assert message == (
        "requirements.txt: no-such-package-anywhere==1.0: no index or find-links offers a wheel of it for the "
        "learner's Python"
    ), message
    assert final.learners[0].exit_code is None, "the learner's command never ran"


def test_refused_models_leave_no_job_and_no_object(
    code_harness: Harness, s3_server: Any, scheduler_buckets: Any, tmp_path: Path
) -> None:
    before_jobs = code_harness.call(code_harness.service.list_jobs("team-a"))
    before_objects = model_objects(scheduler_buckets)
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("weights.bin", os.urandom(20 << 20))  # sent in parts before its directory is read
        zf.writestr("../escape.py", "x")
    not_zip = tmp_path / "notzip.zip"
    not_zip.write_bytes(b"just bytes")
    url_requirement = tmp_path / "url.zip"
    with zipfile.ZipFile(url_requirement, "w") as zf:
        zf.writestr("train.py", "")
        zf.writestr("requirements.txt", "pkg @ https://example.invalid/pkg.zip\n")
    twice = tmp_path / "twice.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(twice, "w") as zf:
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns of the duplicate written on purpose
        zf.writestr("train.py", "print(1)")
        zf.writestr("train.py", "print(2)")
    for archive, why in (
        (evil, "member '../escape.py'"),
        (twice, "member 'train.py' twice"),
        (not_zip, "not a zip archive"),
        (url_requirement, "requirements.txt line 1"),
    ):
        with pytest.raises(ModelCodeError, match=why):
            code_harness.call(code_harness.service.submit("team-a", manifest(s3_server, "true"), model=chunks(archive)))
    with pytest.raises(ManifestError, match="--image"):
        code_harness.call(
            code_harness.service.submit("team-a", manifest(s3_server, "true"), image="Not A Ref", model=chunks(evil))
        )
    assert code_harness.call(code_harness.service.list_jobs("team-a")) == before_jobs
    assert model_objects(scheduler_buckets) == before_objects


def test_a_restarted_scheduler_keeps_the_jobs_model_and_image(
    etcd_server: Any,
    service_options: SchedulerOptions,
    s3_server: Any,
    scheduler_buckets: Any,
    learner_image: str,
    index_url: str,
    tmp_path: Path,
) -> None:
    options = replace(service_options, packages=PackageIndex(index_url=index_url))
    first = Harness(etcd_server, options)
    try:
        archive = model_archive(model_folder(tmp_path, "lkgreet==1.0\n"), tmp_path)
        command = f"python3 train.py --arg y {index_url}/"
        view = first.call(
            first.service.submit("team-a", manifest(s3_server, command), image=learner_image, model=chunks(archive))
        )
        submitted = first.service.shared.jobs[view.job_id].options
    finally:
        first.kill()
    second = Harness(etcd_server, options)
    try:
        assert second.service.shared.jobs[view.job_id].options == submitted
        assert submitted.image == learner_image and submitted.model is not None and submitted.model.requirements
        final = second.wait_status("team-a", view.job_id, TERMINAL)
        assert final.status == "COMPLETED", final
        out = json.loads(stored(scheduler_buckets, f"{view.job_id}/attempt-1/learner-1/results/out.json"))
        assert (out["argv"][:2], out["greeting"]) == (["--arg", "y"], "hello from lkgreet")
    finally:
        second.kill()
