"""The Queue and Cluster pages in Chromium against a real scheduler: its control loop running real admission passes
over the jobs restored from the real etcd, on a cluster of two 4-CPU nodes where a deploy is only recorded (no
container: a job admitted holds its room, reserved, until the end of the module). The preemptions are records
written to etcd as the scheduler writes them (a preemption through the control loop itself is checked by
tests/unit/scheduler/core/test_fabricviews.py); the usage figures are compared with the scheduler's own `/metrics`.
"""

from __future__ import annotations

import asyncio
import csv
import io
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import Page, expect
from prometheus_client.parser import text_string_to_metric_families

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.admit import AdmissionPolicy, Quota
from learnerkit.scheduler.admission.capacity import GIB, Node
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.events.source import follow_etcd
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, save_attempt
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.conftest import REPO
from tests.integration.console.conftest import BUCKET, Pages
from tests.integration.console.test_axe import AXE, _violations
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

T0 = 1_780_000_000.0
"""2026-05-28 20:26 UTC, before the job the test submits: when the records' jobs were submitted."""


class ClusterOfTwo:
    """Two nodes of 4 CPUs; a deploy is only recorded, and no learner ever starts (nor is lost)."""

    def __init__(self) -> None:
        self.deployed: list[str] = []

    def nodes(self) -> list[Node]:
        return [Node(f"node-{i}", 4.0, 8 * GIB) for i in (1, 2)]

    def node_health(self) -> dict[str, NodeHealth]:
        return {node.name: NodeHealth() for node in self.nodes()}

    def deploy(self, job: JobDeployment) -> None:
        self.deployed.append(job.job_id)

    def started(self, job_id: str, learners: int) -> bool:
        return False

    def sidecars(self, job_id: str) -> SidecarStates:
        return SidecarStates(running=frozenset({1}))

    def learners_running(self, job_id: str) -> set[int]:
        return set()

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        return False

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        return {}

    def teardown(self, job_id: str) -> None:
        pass

    def job_ids(self, instance: str) -> set[str]:
        return set(self.deployed)


def manifest(s3: Any, name: str, cpus: float, priority: int = 0) -> str:
    return f"""\
name: {name}
cpus: {cpus}
memory: 16Mb
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
learnerkit: {{priority: {priority}}}
"""


@dataclass(frozen=True)
class Record:
    name: str
    tenant: str
    cpus: float
    priority: int = 0
    status: JobStatus = JobStatus.QUEUED
    preempted: Attempt | None = None
    """Its first attempt, ended PREEMPTED ..."""
    preempted_by: str = ""
    """... for this record's job."""


RECORDS = (
    # Admitted by the first pass, in this order: they fill node-1 (a-run1, a-run2) and 3 CPUs of node-2 (b-run).
    Record("a-run1", "team-a", 2.0),
    Record("b-run", "team-b", 3.0),
    Record("a-run2", "team-a", 2.0),
    # Wait: team-a's running-jobs quota is 2; 1 CPU is free, on node-2; b-behind waits behind b-big for CPU room.
    Record("a-quota", "team-a", 1.0),
    Record("b-big", "team-b", 2.0),
    Record("b-behind", "team-b", 1.0, priority=-5),
    # The preemptions' records, as the scheduler writes them: each victim's attempt ended PREEMPTED, naming its
    # preemptor, with the steps and seconds it lost.
    Record(
        "a-victim",
        "team-a",
        1.0,
        status=JobStatus.HALTED,
        preempted=Attempt(1, ("node-1",), "2026-05-29T09:00:00Z").ended(
            AttemptEnd.PREEMPTED, "", "2026-05-29T09:30:00Z", work_lost_s=0.0, steps_lost=0
        ),
        preempted_by="b-urgent",
    ),
    Record("b-urgent", "team-b", 1.0, priority=10, status=JobStatus.COMPLETED),
    Record(
        "b-victim",
        "team-b",
        1.0,
        status=JobStatus.HALTED,
        preempted=Attempt(1, ("node-2",), "2026-05-29T10:00:00Z").ended(
            AttemptEnd.PREEMPTED, "", "2026-05-29T10:15:00Z", work_lost_s=42.0, steps_lost=7
        ),
        preempted_by="a-run1",
    ),
)


@dataclass(frozen=True)
class Fabric:
    url: str
    tenant: str
    """team-a's token."""
    operator: str
    """An operator's token (tenant ops)."""
    ids: dict[str, str]
    """Job ids by record name."""
    s3: Any


async def _write(store: JobStore, s3: Any) -> dict[str, str]:
    ids = {record.name: f"{record.name}-{uuid.uuid4().hex[:6]}" for record in RECORDS}
    for n, record in enumerate(RECORDS):
        job_id, text = ids[record.name], manifest(s3, record.name, record.cpus, record.priority)
        spec = {
            "manifest": parse_manifest(text, "manifest.yml", None).to_dict(),
            "tenant": record.tenant,
            "job_id": job_id,
        }
        state = JobState(job_id, record.tenant, record.name, T0 + n * 60)
        await store.create(state, spec, text, "manifest.yml")
        if record.preempted is not None:
            preemptor = ids[record.preempted_by]
            said = f"preempted by job {preemptor}"
            await save_attempt(store, job_id, replace(record.preempted, reason=said, preempted_by=preemptor))
        if record.status is not JobStatus.QUEUED:
            await store.save(state.evolve(status=record.status, stage=Stage.DONE))
    return ids


@pytest.fixture(scope="module")
def fabric(etcd_server: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    tokens = tmp_path_factory.mktemp("fabric") / "tokens.json"
    tenant, operator = add_token(tokens, "team-a"), add_token(tokens, "ops", "operator")
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        policy=AdmissionPolicy(quotas={"team-a": Quota(jobs=2)}, ready_timeout_s=3600),
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
        interval_s=0.2,
    )
    create_bucket(s3_server.client(), BUCKET)
    root = f"/learnerkit-fabric-{uuid.uuid4().hex[:8]}/jobs"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    events = EventHub(root, streams_per_address=8)
    stop = asyncio.Event()

    async def start() -> tuple[EtcdStore, Scheduler, dict[str, str], asyncio.Task[None], asyncio.Task[None]]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        ids = await _write(store, s3_server)
        scheduler = Scheduler(store, ClusterOfTwo(), options)
        await scheduler.loop.rebuild()
        following = asyncio.create_task(follow_etcd(events, etcd))
        await asyncio.wait_for(events.ready.wait(), 30)
        running = asyncio.create_task(scheduler.loop.run(stop))
        return etcd, scheduler, ids, following, running

    etcd, scheduler, ids, following, running = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    metrics = scheduler.shared.metrics
    app = create_app(
        scheduler, tokens, events=events, registry=metrics.registry, operator_registry=metrics.operator_registry
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        deployed = {ids[n] for n in ("a-run1", "a-run2", "b-run")}
        wait_until(
            lambda: {j for j, t in scheduler.shared.jobs.items() if t.active} == deployed,
            timeout=30,
            message="the first pass to admit a-run1, a-run2 and b-run",
        )
        yield Fabric(f"http://127.0.0.1:{sock.getsockname()[1]}", tenant, operator, ids, s3_server)
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        loop.call_soon_threadsafe(stop.set)
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(running), 30), loop).result(40)
        loop.call_soon_threadsafe(following.cancel)
        sock.close()
        asyncio.run_coroutine_threadsafe(etcd.delete_prefix(root.rsplit("/", 1)[0] + "/"), loop).result(30)
        asyncio.run_coroutine_threadsafe(etcd.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def _sign_in(page: Page, fabric: Fabric, token: str, path: str) -> None:
    page.goto(fabric.url + path)
    page.get_by_label("Tenant token").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def _row(page: Page, job_id: str) -> dict[str, str]:
    row = page.locator(f'table.queue tr[data-job="{job_id}"]')
    cells = {"place": ".place", "kind": ".kind", "reason": ".reason", "frees": ".frees"}
    return {key: row.locator(selector).inner_text() for key, selector in cells.items()}


def test_the_queue_shows_each_jobs_reason_place_and_what_frees_it_and_the_preemptions(
    fabric: Fabric, pages: Pages
) -> None:
    page = pages.open()
    _sign_in(page, fabric, fabric.tenant, "/ui/queue")
    ids = fabric.ids
    expect(page.locator("table.queue tbody tr")).to_have_count(1)
    quota = _row(page, ids["a-quota"])
    # Within priority 0 team-b (3 of 8 CPUs) goes before team-a (4 of 8): b-big, then a-quota; b-behind last.
    assert quota == {
        "place": "1 of yours; 2 of 3 in all (1 of other tenants ahead)",
        "kind": "quota",
        "reason": "tenant 'team-a' running-jobs quota 2 reached (2 in use, job needs 1)",
        "frees": "quota: 1 running job of yours must end",
    }
    body = page.locator("main").inner_text()
    assert "b-big" not in body and "b-behind" not in body and "team-b" not in body, "other tenants are only counted"
    log = page.locator("table.preemptions tbody tr")
    expect(log).to_have_count(2)
    assert log.nth(0).inner_text().split("\t")[1:] == [
        "a job of priority 0 of another tenant",
        ids["a-run1"],
        "1",
        "7 steps, 42 s of training",
    ]
    assert log.nth(1).inner_text().split("\t")[1:] == [
        ids["a-victim"],
        "a job of priority 10 of another tenant",
        "1",
        "0 steps (checkpointed at its halt)",
    ]
    pages.shot(page, "console-queue")

    # Live: a job submitted through the API appears in the open page, its reason and place with it, no reload.
    page.evaluate("window.notReloaded = true")
    text = manifest(fabric.s3, "a-late", 1.0)
    answer = httpx.post(
        f"{fabric.url}/v1/jobs",
        content=text,
        headers={"Authorization": f"Bearer {fabric.tenant}", "Content-Type": "application/yaml"},
    )
    assert answer.status_code == 201, answer.text
    late = answer.json()["job_id"]
    expect(page.locator(f'table.queue tr[data-job="{late}"] .frees')).to_have_text(
        "quota: 2 running jobs of yours must end", timeout=20_000
    )
    assert page.evaluate("window.notReloaded") is True
    assert _row(page, late)["place"] == "2 of yours; 3 of 4 in all (1 of other tenants ahead)"


def test_a_tenants_token_cannot_open_the_cluster_page(fabric: Fabric, pages: Pages) -> None:
    page = pages.open()
    _sign_in(page, fabric, fabric.tenant, "/ui/jobs")
    expect(page.get_by_role("link", name="Queue")).to_be_visible()
    expect(page.get_by_role("link", name="Cluster")).to_have_count(0)
    for path in ("/ui/cluster", "/ui/cluster/analytics.csv"):
        answer = page.request.get(fabric.url + path)
        assert answer.status == 404 and "node-1" not in answer.text(), path


def _metrics(url: str, token: str) -> dict[tuple[str, str, str], float]:
    answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
    assert answer.status_code == 200, answer.text
    text = answer.text
    wanted = {"learnerkit_scheduler_jobs_submitted", "learnerkit_scheduler_cpu_seconds"}
    return {
        (sample.name, sample.labels["tenant"], sample.labels["framework"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in wanted
    }


def test_the_cluster_pages_figures_and_csv_equal_the_metrics(fabric: Fabric, pages: Pages) -> None:
    page = pages.open()
    _sign_in(page, fabric, fabric.operator, "/ui/cluster")
    expect(page.locator("h1")).to_have_text("Cluster")
    nodes = page.locator("table.nodes tbody tr")
    assert [nodes.nth(i).inner_text().split("\t")[2] for i in range(2)] == ["4 of 4", "3 of 4"]
    tenants = {
        row.get_attribute("data-tenant"): row.inner_text().split("\t")[2:4]
        for row in page.locator("table.tenants tbody tr").all()
    }
    assert tenants["team-a"][0] == "2 of 2" and tenants["team-b"] == ["1 of unlimited", "2"]

    def same_minute() -> tuple[dict[tuple[str, str], tuple[float, float]], Any, Any] | None:
        page.reload()
        before = page.locator("[data-as-of]").get_attribute("data-as-of")
        shown = {
            (str(row.get_attribute("data-tenant")), str(row.get_attribute("data-framework"))): (
                float(row.get_attribute("data-jobs") or "nan"),
                float(row.get_attribute("data-cpu-seconds") or "nan"),
            )
            for row in page.locator("table.usage tbody tr").all()
        }
        with page.expect_download() as download:
            page.get_by_role("link", name="Download the analytics as CSV").click()
        rows = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
        scraped = _metrics(fabric.url, fabric.operator)
        page.reload()
        after = page.locator("[data-as-of]").get_attribute("data-as-of")
        return (shown, rows, scraped) if before == after else None

    shown, rows, scraped = wait_until(same_minute, timeout=150, message="a page, CSV and scrape within one minute")
    assert shown, "the page shows usage"
    # The tenants' names and usage are an operator's: a scrape without a token, or with a tenant's, has none.
    assert _metrics(fabric.url, "") == {} and _metrics(fabric.url, fabric.tenant) == {}
    for (tenant, framework), (jobs, cpu_seconds) in shown.items():
        assert scraped[("learnerkit_scheduler_jobs_submitted", tenant, framework)] == jobs
        assert scraped[("learnerkit_scheduler_cpu_seconds", tenant, framework)] == cpu_seconds
    summed: dict[tuple[str, str], tuple[float, float]] = {}
    for row in rows:
        key = (row["tenant"], row["framework"])
        jobs, cpu = summed.get(key, (0.0, 0.0))
        summed[key] = (jobs + int(row["jobs"]), cpu + float(row["cpu_seconds"]))
    assert summed == shown, "the CSV's rows sum to the page's figures"
    # The records' attempts alone (running ones add up to the minute): b-victim's 15 minutes of 1 CPU.
    assert shown[("team-b", "pytorch")][1] >= 900.0
    pages.shot(page, "console-cluster")


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_axe_finds_no_serious_violation_on_the_queue_and_cluster_pages(
    fabric: Fabric, pages: Pages, dark: bool
) -> None:
    source = AXE.read_text()
    page = pages.open(dark=dark)
    _sign_in(page, fabric, fabric.operator, "/ui/queue")
    found = {"queue": _violations(page, source)}
    page.goto(fabric.url + "/ui/cluster")
    found["cluster"] = _violations(page, source)
    page.set_viewport_size({"width": 375, "height": 900})
    found["cluster, 375 px"] = _violations(page, source)
    wide = page.evaluate(
        """[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 376)
            .map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 8)"""
    )
    assert page.evaluate("document.documentElement.scrollWidth <= 375"), f"sideways scrolling at 375 px: {wide}"
    assert found == {"queue": [], "cluster": [], "cluster, 375 px": []}
