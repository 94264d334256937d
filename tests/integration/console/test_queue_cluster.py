"""The Queue and Cluster pages in Chromium over a live preemption on the Docker backend: a real scheduler whose
loop runs (as in tests/integration/scheduler/test_preemption_docker.py: a job may be preempted one second after it
runs), real learner pairs, etcd and SeaweedFS; the REST API and the console on uvicorn, the event hub following
etcd. The engine's host is one node and each job asks for three quarters of its CPUs, so no two run together:
team-a's low-priority job trains, team-b's waits behind it, and team-a's urgent job, submitted while the Queue page
is open, preempts the first. The pages are compared with what the CLI says (`job status --output json`: the
preempted attempt, the waiting job's reason; `scheduler nodes --output json`: who holds the room) and the usage
figures with the scheduler's own `/metrics`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from playwright.sync_api import Page, expect
from prometheus_client.parser import text_string_to_metric_families

from learnerkit.cli import cli
from learnerkit.common.engine import engine
from learnerkit.scheduler.admission.admit import Quota
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import NODE_NAME
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.preemption.rules import PreemptionRules
from tests.integration.console.conftest import Pages, serving
from tests.integration.console.test_axe import AXE, _violations
from tests.integration.scheduler.conftest import (
    TERMINAL,
    Harness,
    leftovers,
    manifest,
    scheduler_buckets,
    service_options,
)
from tests.integration.scheduler.test_preemption_docker import running_with_metrics
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]
__all__ = ["scheduler_buckets", "service_options"]  # fixtures shared

TRAIN = "SMOKE_MIN_STEP_SECONDS=0.1 python /opt/learner/smoke/train.py --steps 100000 --checkpoint-every 10"
"""Trains until it is cancelled, a checkpoint each 10 steps: its halt loses no step."""


@dataclass
class Fabric:
    url: str
    tenant: str
    """team-a's token."""
    operator: str
    """An operator's token (tenant ops)."""
    harness: Harness
    root: str
    """The jobs' root in etcd: the scheduler's, its sidecars' and `scheduler nodes`'."""
    etcd_endpoint: str
    s3: Any
    cpus: float
    """What each job asks for: three quarters of the node's CPUs."""
    node_cpus: float
    victim: str
    """team-a's job of priority -10, training."""
    waiting: str
    """team-b's job of priority -20, waiting behind it."""
    urgent: str = field(default="")
    """team-a's job of priority 0 that preempts the victim (`preempt`)."""

    def job_text(self, priority: int, command: str) -> str:
        extra = f"learnerkit:\n  priority: {priority}\n  halt_grace: 120\n"
        return manifest(self.s3, command, cpus=self.cpus, extra=extra)

    def preempt(self) -> str:
        """Submit the urgent job through the API, once, as a user would."""
        if not self.urgent:
            answer = httpx.post(
                f"{self.url}/v1/jobs",
                content=self.job_text(0, "sleep 3600"),
                headers={"Authorization": f"Bearer {self.tenant}", "Content-Type": "application/yaml"},
            )
            assert answer.status_code == 201, answer.text
            self.urgent = str(answer.json()["job_id"])
        return self.urgent

    def preempted(self) -> None:
        """The urgent job holds the room; the victim waits, its attempt ended PREEMPTED."""
        urgent = self.preempt()
        self.harness.wait_status("team-a", urgent, {"PROCESSING"}, timeout=180)
        self.harness.wait_status("team-a", self.victim, {"PREEMPTED"}, timeout=60)

    def status(self, job_id: str) -> Any:
        """`learnerkit job status JOB --output json`, team-a's."""
        env = {"LEARNERKIT_SCHEDULER_URL": self.url, "LEARNERKIT_TOKEN": self.tenant, "COLUMNS": "80"}
        result = CliRunner().invoke(cli, ["job", "status", job_id, "--output", "json"], env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    def nodes(self) -> Any:
        """`learnerkit scheduler nodes --output json`, as an operator runs it beside the scheduler's etcd."""
        env = {"ETCD_ENDPOINTS": self.etcd_endpoint, "LEARNERKIT_ETCD_ROOT": self.root, "COLUMNS": "80"}
        # On a thread of its own: it runs its own asyncio loop, and Playwright's holds this thread.
        with ThreadPoolExecutor(1) as thread:
            result = thread.submit(
                CliRunner().invoke, cli, ["scheduler", "nodes", "--output", "json"], env=env
            ).result()
        assert result.exit_code == 0, result.output
        return json.loads(result.output)


@pytest.fixture(scope="module")
def fabric(
    etcd_server: Any,
    s3_server: Any,
    service_options: SchedulerOptions,
    scheduler_buckets: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fabric]:
    tokens = tmp_path_factory.mktemp("fabric") / "tokens.json"
    tenant, operator = add_token(tokens, "team-a"), add_token(tokens, "ops", "operator")
    root = f"/learnerkit-fabric-{uuid.uuid4().hex[:8]}/jobs"
    options = replace(
        service_options,
        platform=replace(service_options.platform, etcd_root=root),
        policy=replace(service_options.policy, quotas={"team-a": Quota(jobs=2)}),
        preemption=PreemptionRules(min_run_s=1.0),
    )
    harness = Harness(etcd_server, options, root=root)
    metrics = harness.service.shared.metrics
    registries = {"registry": metrics.registry, "operator_registry": metrics.operator_registry}
    node_cpus = float(engine().info()["NCPU"])
    try:
        with serving(harness, tokens, **registries) as (url, _):
            made = Fabric(
                url,
                tenant,
                operator,
                harness,
                root,
                etcd_server.endpoint,
                s3_server,
                round(node_cpus * 0.75, 2),
                node_cpus,
                victim="",
                waiting="",
            )
            try:
                made.victim = harness.call(harness.service.submit("team-a", made.job_text(-10, TRAIN))).job_id
                running_with_metrics(harness, made.victim)
                made.waiting = harness.call(harness.service.submit("team-b", made.job_text(-20, TRAIN))).job_id
                yield made
            finally:
                _end_jobs(made)
    finally:
        harness.kill()


def _end_jobs(made: Fabric) -> None:
    ids = [("team-a", made.victim), ("team-b", made.waiting), ("team-a", made.urgent)]
    for owner, job_id in ids:
        if job_id:
            with contextlib.suppress(JobStateError):  # ended already
                made.harness.call(made.harness.service.cancel(owner, job_id))
    for owner, job_id in ids:
        if job_id:
            made.harness.wait_status(owner, job_id, TERMINAL, timeout=120)
            wait_until(lambda j=job_id: leftovers(j) == [], timeout=60, message=f"{job_id}'s containers to go")


def _sign_in(page: Page, fabric: Fabric, token: str, path: str) -> None:
    page.goto(fabric.url + path)
    page.get_by_label("Tenant token").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def _cells(row: Any) -> list[str]:
    return [str(cell) for cell in row.locator("td").all_inner_texts()]


def test_a_live_preemption_shows_in_the_open_queue_page_as_job_status_says(fabric: Fabric, pages: Pages) -> None:
    page = pages.open()
    _sign_in(page, fabric, fabric.tenant, "/ui/queue")
    # The victim trains; team-b's job waits, counted and never named.
    expect(page.locator("table.queue")).to_have_count(0)
    expect(page.locator("#queue-live .count")).to_have_text("0 of your jobs queued; 1 job queued in all.")
    expect(page.locator("table.preemptions")).to_have_count(0)

    # Live: the urgent job, submitted through the API, preempts the victim in the open page, no reload.
    page.evaluate("window.notReloaded = true")
    urgent = fabric.preempt()
    victim = page.locator(f'table.queue tr[data-job="{fabric.victim}"]')
    expect(victim.locator(".status")).to_have_text("PREEMPTED", timeout=120_000)
    log = page.locator("table.preemptions tbody tr")
    expect(log).to_have_count(1, timeout=30_000)
    expect(log.locator(".lost")).to_have_text("0 steps (checkpointed at its halt)", timeout=120_000)

    said = fabric.status(fabric.victim)
    first = said["attempts"][0]
    assert (first["number"], first["ended_by"], first["reason"]) == (1, "PREEMPTED", f"preempted by job {urgent}")
    assert first["steps_lost"] == 0, first
    assert _cells(log.first)[1:] == [fabric.victim, urgent, "1", "0 steps (checkpointed at its halt)"]
    # Behind the urgent job for the node's CPUs, ahead of team-b's lower-priority job.
    wait_until(
        lambda: victim.locator(".reason").inner_text() == fabric.status(fabric.victim)["reason"],
        timeout=30,
        message="the page's reason to be the one `job status` says",
    )
    expect(victim.locator(".place")).to_have_text("1 of yours; 1 of 2 in all", timeout=30_000)
    expect(victim.locator(".kind")).to_have_text("node fit")
    expect(victim.locator(".frees")).to_contain_text("CPU")
    body = page.locator("main").inner_text()
    assert fabric.waiting not in body and "team-b" not in body, "other tenants are only counted"
    assert page.evaluate("window.notReloaded") is True
    pages.shot(page, "console-queue")
    page.set_viewport_size({"width": 800, "height": 900})
    pages.shot(page, "console-queue-800")


def test_a_tenants_token_cannot_open_the_cluster_page(fabric: Fabric, pages: Pages) -> None:
    page = pages.open()
    _sign_in(page, fabric, fabric.tenant, "/ui/jobs")
    expect(page.get_by_role("link", name="Queue")).to_be_visible()
    expect(page.get_by_role("link", name="Cluster")).to_have_count(0)
    for path in ("/ui/cluster", "/ui/cluster/analytics.csv"):
        answer = page.request.get(fabric.url + path)
        assert answer.status == 404 and NODE_NAME not in answer.text(), path


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


def test_the_cluster_page_shows_who_holds_the_room_and_figures_equal_to_the_metrics(
    fabric: Fabric, pages: Pages
) -> None:
    fabric.preempted()
    page = pages.open()
    _sign_in(page, fabric, fabric.operator, "/ui/cluster")
    expect(page.locator("h1")).to_have_text("Cluster")
    [node] = fabric.nodes()
    assert (node["node"], node["state"], [j["job_id"] for j in node["jobs"]]) == (NODE_NAME, "ready", [fabric.urgent])
    row = page.locator(f'table.nodes tr[data-node="{NODE_NAME}"]')
    assert row.locator(".jobs").inner_text() == " ".join(j["job_id"] for j in node["jobs"])
    assert _cells(row)[2] == f"{fabric.cpus:g} of {fabric.node_cpus:g}"
    tenants = {
        row.get_attribute("data-tenant"): _cells(row)[2:4] for row in page.locator("table.tenants tbody tr").all()
    }
    assert tenants == {"team-a": ["1 of 2", "1"], "team-b": ["0 of unlimited", "1"]}

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

    def with_every_job() -> tuple[dict[tuple[str, str], tuple[float, float]], Any, Any] | None:
        """The figures count to the whole minute: the three jobs show once the minute they were submitted ends."""
        seen = same_minute()
        return seen if seen is not None and sum(jobs for jobs, _ in seen[0].values()) == 3 else None

    shown, rows, scraped = wait_until(
        with_every_job, timeout=150, interval=2.0, message="a page, CSV and scrape within one minute, every job in"
    )
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
    # Submitted today: the victim and the urgent job of team-a, the waiting one of team-b; the victim's preempted
    # attempt and the urgent job's running one used team-a's CPUs.
    assert {key: jobs for key, (jobs, _) in shown.items()} == {("team-a", "pytorch"): 2, ("team-b", "pytorch"): 1}
    assert shown[("team-a", "pytorch")][1] > 0 and shown[("team-b", "pytorch")][1] == 0
    pages.shot(page, "console-cluster")
    page.set_viewport_size({"width": 800, "height": 900})
    pages.shot(page, "console-cluster-800")


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
