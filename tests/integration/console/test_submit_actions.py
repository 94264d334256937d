"""Submitting a job and acting on it from the console, in Debian's chromium against a real scheduler (conftest.py;
its loop is not running, so a submitted job stays QUEUED until an action moves it)."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.conftest import REPO
from tests.integration.console.conftest import BUCKET, JOBS_A, Console, Pages, log_in

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]


def _manifest(s3: Any, *, gpus: str = "0", memory: str = "16Mb") -> str:
    return f"""\
name: submitted-from-the-page
gpus: {gpus}
memory: {memory}
cpus: 0.01
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {BUCKET}}}
    training_results: {{container: {BUCKET}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


def _model(folder: Path) -> Path:
    path = folder / "model.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("train.py", "print('training')\n")
    path.write_bytes(buffer.getvalue())
    return path


def _count(page: Page) -> str:
    page.goto(page.url.split("/ui/")[0] + "/ui/jobs")
    return page.get_by_role("status").inner_text()


def _act(page: Page, label: str) -> None:
    """Press the action's button on the job page, then confirm it on the page that asks."""
    page.get_by_role("region", name="Actions").get_by_role("button", name=label).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"{label}: ")
    page.locator("form.confirm").get_by_role("button", name=label).click()


def test_a_manifest_with_two_errors_shows_each_with_its_line_and_queues_nothing(
    console: Console, pages: Pages, s3_server: Any
) -> None:
    # Refused whatever its keys: placeholders keep the screenshot free of the test store's.
    bad = _manifest(s3_server, gpus="-1", memory="lots")
    bad = bad.replace(s3_server.access_key, "ACCESS-KEY").replace(s3_server.secret_key, "SECRET-KEY")
    with pytest.raises(ManifestError) as refused:
        parse_manifest(bad, "manifest.yml", ImageCatalog(REPO).frameworks())
    expected = [str(problem) for problem in refused.value.problems]
    assert len(expected) == 2 and [p.split(":")[1] for p in expected] == ["2", "3"]
    page = pages.open(javascript=False)
    log_in(page, console)
    before = _count(page)
    page.get_by_role("navigation", name="Console").get_by_role("link", name="Submit").click()
    page.get_by_label("Manifest", exact=True).fill(bad)
    page.get_by_role("button", name="Submit").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("2 problems in the manifest; nothing was queued.")
    assert alert.locator("li").all_inner_texts() == expected
    expect(page.get_by_label("Manifest", exact=True)).to_have_value(bad)
    pages.shot(page, "submit-problems")
    assert _count(page) == before == f"{JOBS_A + 1} jobs"


def test_a_good_manifest_and_its_zip_lead_to_the_new_jobs_page_and_the_list(
    console: Console, pages: Pages, s3_server: Any, tmp_path: Path
) -> None:
    page = pages.open(javascript=False)
    log_in(page, console, path="/ui/submit")
    page.get_by_label("Manifest", exact=True).fill(_manifest(s3_server))
    page.get_by_label("Or a zip").set_input_files(_model(tmp_path))
    pages.shot(page, "submit")
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/job-[0-9a-f]+$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("submitted-from-the-page QUEUED")
    job_id = page.url.rsplit("/", 1)[-1]
    page.goto(console.url + "/ui/jobs?q=submitted-from-the-page")
    expect(page.get_by_role("link", name=job_id)).to_be_visible()


def test_a_folder_chosen_in_the_page_is_zipped_checked_and_stored_as_the_cli_does(
    console: Console, pages: Pages, s3_server: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "digits"
    (folder / "lib").mkdir(parents=True)
    (folder / "train.py").write_text("from lib.net import NET\nprint(NET)\n")
    (folder / "lib" / "net.py").write_text("NET = 'a net'\n")
    page = pages.open(javascript=False)
    log_in(page, console, path="/ui/submit")
    page.get_by_label("Manifest", exact=True).fill(_manifest(s3_server))
    page.get_by_label("Model code: a folder").set_input_files(folder)
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/job-[0-9a-f]+$"))
    job_id = page.url.rsplit("/", 1)[-1]
    stored = s3_server.client().get_object(Bucket=BUCKET, Key=f"{job_id}/model/model.zip")["Body"].read()
    with zipfile.ZipFile(io.BytesIO(stored)) as archive:
        assert {name: archive.read(name) for name in archive.namelist()} == {
            "train.py": (folder / "train.py").read_bytes(),
            "lib/net.py": (folder / "lib" / "net.py").read_bytes(),
        }
    (folder / "requirements.txt").write_text("numpy==2.0\nhttps://example.invalid/x.whl\n")
    page.goto(console.url + "/ui/submit")
    page.get_by_label("Manifest", exact=True).fill(_manifest(s3_server))
    page.get_by_label("Model code: a folder").set_input_files(folder)
    page.get_by_role("button", name="Submit").click()
    # As `job submit MANIFEST FOLDER` words it (tests/unit/scheduler/api/test_model_upload.py).
    expected = "requirements.txt line 2: 'https://example.invalid/x.whl': URLs are not allowed"
    expect(page.get_by_role("alert")).to_contain_text(expected)


def test_halt_resume_cancel_and_delete_from_the_page_each_confirmed(
    console: Console, pages: Pages, s3_server: Any
) -> None:
    page = pages.open(javascript=False)
    log_in(page, console, path="/ui/submit")
    page.get_by_label("Manifest", exact=True).fill(_manifest(s3_server))
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/job-[0-9a-f]+$"))
    job_url = page.url
    heading = page.get_by_role("heading", level=1)
    page.get_by_role("region", name="Actions").get_by_role("button", name="Halt").click()
    expect(heading).to_contain_text("Halt: submitted-from-the-page")
    pages.shot(page, "confirm-halt")
    page.get_by_role("link", name="Back to the job, doing nothing").click()
    expect(heading).to_have_text("submitted-from-the-page QUEUED")
    for label, status in (("Halt", "HALTED"), ("Resume", "QUEUED"), ("Cancel", "CANCELLED")):
        _act(page, label)
        expect(heading).to_have_text(f"submitted-from-the-page {status}")
        expect(page.get_by_role("status")).not_to_be_empty()
    pages.shot(page, "job-cancelled")
    _act(page, "Resume")
    expect(heading).to_have_text("Resume: refused")
    expect(page.locator(".error")).to_contain_text("is CANCELLED: only HALTED or FAILED jobs resume")
    page.goto(job_url)
    _act(page, "Delete")
    expect(page).to_have_url(console.url + "/ui/jobs")
    page.goto(job_url)
    expect(heading).to_have_text("Not found")


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    console: Console, pages: Pages, s3_server: Any
) -> None:
    page = pages.open()
    log_in(page, console)
    before = _count(page)
    page.goto(f"{console.url}/ui/jobs/{console.job_id}")
    for path, form in (
        (f"/ui/jobs/{console.job_id}/actions/resume", {"confirmed": "yes"}),
        (f"/ui/jobs/{console.job_id}/actions/delete", {"confirmed": "yes", "csrf": "forged"}),
    ):
        answer = page.request.post(console.url + path, form=form, max_redirects=0)
        assert answer.status == 403 and "CSRF token is missing or wrong" in answer.text(), path
    submit = page.request.post(
        console.url + "/ui/submit", multipart={"manifest": _manifest(s3_server)}, max_redirects=0
    )
    assert submit.status == 403
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text("mnist-preempted HALTED")
    assert _count(page) == before


def test_another_tenants_job_is_refused_and_a_state_that_forbids_it_is_named(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console, path=f"/ui/jobs/{console.job_id}")
    csrf = page.locator("form.logout input[name=csrf]").get_attribute("value")
    assert csrf
    for name in ("halt", "cancel", "delete"):
        answer = page.request.post(
            f"{console.url}/ui/jobs/{console.other_job_id}/actions/{name}",
            form={"csrf": csrf, "confirmed": "yes"},
            max_redirects=0,
        )
        assert answer.status == 404 and "There is no job" in answer.text(), name
    _act(page, "Halt")
    expect(page.get_by_role("heading", level=1)).to_have_text("Halt: refused")
    expect(page.locator(".error")).to_have_text(f"job {console.job_id} is HALTED: nothing to halt")
    other = pages.open()
    log_in(other, console, token=console.other_token, path=f"/ui/jobs/{console.other_job_id}")
    expect(other.get_by_role("heading", level=1)).to_have_text("secret-of-b QUEUED")


def test_the_submit_and_confirmation_pages_fit_375_px_in_dark_mode(console: Console, pages: Pages) -> None:
    page = pages.open(width=375, javascript=False, dark=True)
    log_in(page, console, path="/ui/submit")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.goto(f"{console.url}/ui/jobs/{console.job_id}")
    page.get_by_role("region", name="Actions").get_by_role("button", name="Evaluate again").click()
    expect(page.get_by_label("Evaluations")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    pages.shot(page, "confirm-evaluate-375-dark")
