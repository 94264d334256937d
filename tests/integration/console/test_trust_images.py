"""The trust panel and the Images view against a real scheduler: a finished, evaluated job whose provenance and
evaluation rounds the platform's real writers signed, its objects in the real SeaweedFS, its record in the real
etcd; the images of this host's matrix with the build tool's own records. A byte changed in the store turns the
open panel red naming the file, without a reload; the file deleted shows missing."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Page, expect

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.common import engineimages
from learnerkit.common.keyring import PublishedKey
from learnerkit.common.signing import load_public_key, public_key_path
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit_build.publish.records import publish_state
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.state import state_home
from tests.integration.catalog.modeljob import evaluated
from tests.integration.conftest import REPO
from tests.integration.console.conftest import Console, Pages, log_in
from tests.integration.console.test_axe import _violations, axe_source  # noqa: F401 (a fixture)
from tests.unit.scheduler.provenance import jobfolder
from tests.unit.scheduler.provenance.jobfolder import JOB, PREFIX, SIDECAR_ID, finished_job
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

RESULT = "attempt-1/learner-1/results/model.bin"
WIDER_THAN_THE_PAGE = """[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 376)
    .slice(-5).map(e => e.tagName + '.' + e.className + ': ' + e.textContent.slice(0, 60))"""
"""What makes a page scroll sideways, for the failure's message."""
LIVE_S = 60_000
"""Within a minute: the issue's bound for a change in the store to show on an open panel (ms)."""


@dataclass(frozen=True)
class Served:
    console: Console
    bucket: str
    s3: Any


def _manifest(s3: Any, bucket: str) -> str:
    return f"""\
name: mnist
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {bucket}}}
    training_results: {{container: {bucket}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


def _images(image: str) -> ImageFact:
    """The job's images as the writer describes them, the sidecar by the ID this host's engine has under its
    reference (the panel asks the engine: a made-up ID would read as changed)."""
    fact = jobfolder.describe(image)
    if fact.digest == SIDECAR_ID:
        return ImageFact(fact.reference, engineimages.image_id(fact.reference) or image)
    return fact


@pytest.fixture(scope="module")
def served(etcd_server: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("trust")
    objects, key = finished_job(folder, images=_images)
    evaluated(objects, key, "robust", "robustness", "passed", 1)
    evaluated(objects, key, "fair", "fairness", "passed", 2)
    published = [PublishedKey(load_public_key(public_key_path(key)).keyid, public_key_path(key).read_text(), True)]
    tokens = folder / "tokens.json"
    token, other_token = add_token(tokens, "team-a"), add_token(tokens, "team-b")
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    bucket = f"trust-{uuid.uuid4().hex[:8]}"
    s3 = s3_server.client()
    create_bucket(s3, bucket)
    for name, data in objects.objects.items():
        s3.put_object(Bucket=bucket, Key=name, Body=data)
    root = f"/learnerkit-trust-{uuid.uuid4().hex[:8]}/jobs"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    text = _manifest(s3_server, bucket)

    async def start() -> tuple[EtcdStore, Scheduler]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": "team-a", "job_id": JOB}
        state = JobState(JOB, "team-a", "mnist", 1_800_000_000.0)
        await store.create(state, spec, text, "manifest.yml")
        # HALTED: a job that can resume keeps its store's credentials over a restart, so the scheduler reads it.
        await store.save(state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user"))
        scheduler = Scheduler(store, DockerBackend(), options)
        await scheduler.loop.rebuild()
        return etcd, scheduler

    etcd, scheduler = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    settings = ConsoleSettings(own_names("127.0.0.1"), trust_recheck_s=1.0)
    app = create_app(scheduler, tokens, keys=published, console=settings)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        yield Served(Console(url, token, other_token, tokens, JOB, "", root, lambda _k, _v: None), bucket, s3)
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        sock.close()
        asyncio.run_coroutine_threadsafe(etcd.delete_prefix(root.rsplit("/", 1)[0] + "/"), loop).result(30)
        asyncio.run_coroutine_threadsafe(etcd.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def _trust(page: Page, served: Served) -> None:
    log_in(page, served.console, path=f"/ui/jobs/{JOB}/trust")
    expect(page.get_by_role("heading", name="Trust: mnist")).to_be_visible()


def test_the_trust_panel_and_the_images_pages_have_no_serious_violation_nor_scroll_sideways_at_375_px(
    served: Served,
    pages: Pages,
    axe_source: str,  # noqa: F811
) -> None:
    page = pages.open()
    _trust(page, served)
    expect(page.locator("[data-trust=verdict]")).to_contain_text("Verified")
    found = {"trust": _violations(page, axe_source)}
    pages.shot(page, "console-trust")
    page.goto(served.console.url + "/ui/images")
    found["images"] = _violations(page, axe_source)
    pages.shot(page, "console-images", full_page=False)
    rows = page.locator("tbody tr[data-spec]")
    scanned = rows.filter(has=page.locator("[data-col=scan] .o-passed, [data-col=scan] .o-failed"))
    (scanned if scanned.count() else rows).first.locator("a").click()
    page.wait_for_load_state()
    found["image"] = _violations(page, axe_source)
    pages.shot(page, "console-image", full_page=False)
    assert found == {"trust": [], "images": [], "image": []}, json.dumps(found, indent=1)
    narrow = pages.open(width=375, dark=True)
    _trust(narrow, served)
    for path in (f"/ui/jobs/{JOB}/trust", "/ui/images", page.url.removeprefix(served.console.url)):
        narrow.goto(served.console.url + path)
        wider = narrow.evaluate(WIDER_THAN_THE_PAGE)
        assert narrow.evaluate("document.documentElement.scrollWidth") <= 375, (path, wider)


def test_a_result_changed_in_the_store_turns_the_open_panel_red_naming_it_then_missing(
    served: Served, pages: Pages
) -> None:
    page = pages.open()
    _trust(page, served)
    verdict = page.locator("[data-trust=verdict]")
    expect(verdict).to_contain_text("Verified")
    expect(page.locator("h3", has_text="Round 2")).to_contain_text("passed")
    page.evaluate("window.stillThisPage = true")
    stored = served.s3.get_object(Bucket=served.bucket, Key=PREFIX + RESULT)["Body"].read()
    served.s3.put_object(Bucket=served.bucket, Key=PREFIX + RESULT, Body=bytes([stored[0] ^ 1]) + stored[1:])
    named = page.locator(f'.trust-problems li[data-item="result {RESULT}"]')
    expect(named).to_contain_text("changed since it was signed", timeout=LIVE_S)
    expect(verdict).to_contain_text("Not verified: 1 changed")
    pages.shot(page, "console-trust-changed", full_page=False)
    served.s3.delete_object(Bucket=served.bucket, Key=PREFIX + RESULT)
    expect(named).to_contain_text("missing from the store", timeout=LIVE_S)
    expect(verdict).to_contain_text("1 missing")
    assert page.evaluate("window.stillThisPage") is True  # swapped in place: never reloaded
    served.s3.put_object(Bucket=served.bucket, Key=PREFIX + RESULT, Body=stored)
    expect(verdict).to_contain_text("Verified", timeout=LIVE_S)


def test_another_tenants_trust_panel_is_the_404_page(served: Served, pages: Pages) -> None:
    page = pages.open()
    log_in(page, served.console, token=served.console.other_token, path=f"/ui/jobs/{JOB}/trust/panel")
    expect(page.get_by_text(f"There is no job '{JOB}'.")).to_be_visible()


def _recorded_verdict(reference: str) -> str:
    """What this host's engine and the build tool's scan records say of an image, read from the records."""
    image_id = engineimages.image_id(reference)
    if image_id is None:
        return "not built"
    record = state_home() / "image-scans" / f"{image_id.replace(':', '_')}.json"
    if not record.is_file():
        return "not scanned"
    return "passed" if json.loads(record.read_bytes())["passed"] else "failed"


def test_the_images_page_lists_the_matrix_with_each_scan_verdict_the_records_give(served: Served, pages: Pages) -> None:
    page = pages.open()
    log_in(page, served.console, path="/ui/images")
    matrix = load_matrix(REPO).images
    rows = page.locator("tbody tr[data-spec]")
    expect(rows).to_have_count(len(matrix))
    expected = {image.name: _recorded_verdict(f"{image.repository()}:{image.tag}") for image in matrix}
    shown = {
        str(row.get_attribute("data-spec")): row.locator("[data-col=scan] .outcome").inner_text() for row in rows.all()
    }
    assert shown == expected
    published = {  # this host's publish records, as `image ls` reads them
        image.name: publish_state(ref, engineimages.image_id(ref)).state
        for image in matrix
        for ref in [f"{image.repository()}:{image.tag}"]
    }
    shown_published = {
        str(row.get_attribute("data-spec")): row.locator("[data-col=published]").get_attribute("data-publish")
        for row in rows.all()
    }
    assert shown_published == published
    scanned = [name for name, verdict in expected.items() if verdict in ("passed", "failed")]
    if not scanned:
        return  # no image of this host was scanned: the page's verdicts were checked above
    spec = scanned[0]
    image = next(i for i in matrix if i.name == spec)
    image_id = engineimages.image_id(f"{image.repository()}:{image.tag}")
    assert image_id is not None
    folder = state_home() / "image-scans" / image_id.replace(":", "_")
    report = json.loads((folder / "report.json").read_bytes())
    page.goto(f"{served.console.url}/ui/images/{spec}")
    expect(page.locator("[data-fact=image-id]")).to_have_text(image_id)
    findings = [c for c in report["checks"] if c["status"] != "PASS"]
    expect(page.locator("table.findings tbody tr")).to_have_count(len(findings))
    with page.expect_download() as download:
        page.get_by_role("link", name="SBOM (CycloneDX)").click()
    assert download.value.path().read_bytes() == (folder / "sbom.cdx.json").read_bytes()
    tested = state_home() / "image-tests" / f"{image_id.replace(':', '_')}.json"
    slsa = page.get_by_role("link", name="SLSA provenance")
    expect(slsa).to_have_count(1 if tested.is_file() else 0)
    if tested.is_file():
        with page.expect_download() as download:
            slsa.click()
        statement = json.loads(download.value.path().read_bytes())
        assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
        assert statement["subject"][0]["digest"] == {"sha256": image_id.removeprefix("sha256:")}
