"""End to end: a job submitted through the console runs in real learner containers on the Docker backend (the
scheduler's loop running, the sidecar and the PyTorch learner image of the `test` tier), is halted and resumed
from its page and completes. The page is never reloaded: it follows the live stream (an event hub over the real
etcd), from QUEUED to COMPLETED, its learner's metrics, its charts drawn from the stored history and its log."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.imagetest.smokedata import write_smoke_dataset
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO
from tests.integration.console.conftest import Pages, serving
from tests.integration.scheduler.conftest import DATA_BUCKET, RESULTS_BUCKET, TERMINAL, Harness, leftovers, manifest

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

SMOKE = "SMOKE_MIN_STEP_SECONDS=0.1 python /opt/learner/smoke/train.py --steps 80 --checkpoint-every 10"


@pytest.fixture(scope="module")
def served(
    etcd_server: Any, s3_server: Any, build_inputs: BuildInputs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Harness]]:
    """The console's address, team-a's token and the scheduler, whose loop runs jobs on Docker."""
    client = s3_server.client()
    for bucket in (DATA_BUCKET, RESULTS_BUCKET):
        create_bucket(client, bucket)
    folder = tmp_path_factory.mktemp("console-docker")
    client.upload_file(str(write_smoke_dataset(folder)), DATA_BUCKET, "smoke/train.csv")
    catalog = ImageCatalog(REPO)
    sidecar = build_sidecar(REPO, build_inputs, lambda line: None)  # built already: an unchanged sidecar is kept
    options = SchedulerOptions(
        platform=Platform(
            etcd_endpoints=etcd_server.endpoint, sidecar_image=sidecar.immutable_reference or sidecar.reference
        ),
        catalog=catalog.frameworks(),
        resolve_image=catalog.resolve,
        policy=AdmissionPolicy(ready_timeout_s=120),
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    harness = Harness(etcd_server, options)
    tokens = folder / "tokens.json"
    token = add_token(tokens, "team-a")
    try:
        with serving(harness, tokens) as (url, _):
            yield url, token, harness
    finally:
        harness.kill()


def _status_becomes(page: Page, wanted: str, timeout_s: float) -> None:
    """The open page shows ``wanted`` (from the live stream: no reload)."""
    expect(page.locator("h1 .status")).to_have_text(wanted, timeout=timeout_s * 1000)


def _act(page: Page, label: str) -> None:
    """Press the action's button and confirm it: two form posts, back on the job's page, which is then marked to
    prove it is never reloaded after."""
    page.get_by_role("region", name="Actions").get_by_role("button", name=label).click()
    page.locator("form.confirm").get_by_role("button", name=label).click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/job-[0-9a-f]+\?done="))
    page.evaluate("window.sameDocument = true")


def _not_reloaded(page: Page) -> None:
    assert page.evaluate("window.sameDocument") is True, "the page was reloaded"


def test_submitted_from_the_page_halted_and_resumed_from_it_then_completed(
    served: tuple[str, str, Harness], pages: Pages, s3_server: Any
) -> None:
    url, token, harness = served
    page = pages.open()
    page.goto(url + "/ui/submit")
    page.get_by_label("Tenant token").fill(token)
    page.get_by_role("button", name="Log in").click()
    text = manifest(s3_server, SMOKE, extra="learnerkit:\n  halt_grace: 20\n")
    page.get_by_label("Manifest", exact=True).fill(text)
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"/ui/jobs/job-[0-9a-f]+$"))
    page.evaluate("window.sameDocument = true")
    job_id = page.url.rsplit("/", 1)[-1]
    try:
        _run_halt_resume(page, pages)
    finally:
        if harness.call(harness.service.get("team-a", job_id)).status not in TERMINAL:
            harness.call(harness.service.cancel("team-a", job_id))
    assert leftovers(job_id) == []


def _run_halt_resume(page: Page, pages: Pages) -> None:
    expect(page.locator("h1 .status")).to_have_text(re.compile("^(QUEUED|PENDING|PROCESSING)$"))  # moving on
    _status_becomes(page, "PROCESSING", timeout_s=240)
    expect(page.locator("table.stack")).to_contain_text("loss=", timeout=120_000)  # the learner's metrics events
    log = page.locator("pre[data-live=log]")  # the page was drawn before the job had a log: it came with the events
    expect(log).to_contain_text("training on", timeout=60_000)
    _not_reloaded(page)
    _act(page, "Halt")
    _status_becomes(page, "HALTED", timeout_s=120)
    _not_reloaded(page)
    _act(page, "Resume")
    _status_becomes(page, "COMPLETED", timeout_s=300)
    expect(page.locator(".timeline")).to_contain_text("resumed from attempt 1's checkpoint")
    expect(log).to_contain_text("resumed from step", timeout=60_000)
    loss = page.locator('figure.chart[data-series="loss"]')  # drawn from the history the sidecar stored
    expect(loss.locator("canvas")).to_have_count(1, timeout=60_000)
    expect(loss).to_have_attribute("data-total", re.compile(r"^[1-9]\d*$"))
    _not_reloaded(page)
    pages.shot(page, "job-completed-after-resume")
