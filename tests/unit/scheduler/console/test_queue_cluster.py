"""The Queue and Cluster pages over the fake facade: what a queued job shows, the preemption log's words, the
Cluster page refused to a tenant's session and open to an operator's, and its CSV holding the page's figures."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.console.cluster_views import CSV_COLUMNS
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit.scheduler.console.queue_views import lost_words
from learnerkit.scheduler.fabric import (
    ClusterView,
    NodeView,
    PreemptionView,
    QueuedJobView,
    QueueView,
    TenantView,
    UsageRow,
)
from tests.unit.scheduler.fakefacade import FakeFacade


@dataclass(frozen=True)
class Tokens:
    path: Path
    tenant: str
    operator: str


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    return Tokens(path, add_token(path, "team-a"), add_token(path, "ops", "operator"))


def logged_in(client: TestClient, token: str) -> TestClient:
    form = client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    client.post("/ui/login", data={"csrf": csrf.group(1), "token": token})
    return client


@pytest.fixture
def fake() -> FakeFacade:
    facade = FakeFacade()
    facade.queues["team-a"] = QueueView(
        "team-a",
        (
            QueuedJobView(
                "job-a1",
                "mnist",
                5,
                "QUEUED",
                "quota",
                "tenant 'team-a' running-jobs quota 1 reached",
                "quota: 1 running job of yours must end",
                1,
                3,
                2,
                "2026-11-29T01:00:00Z",
            ),
        ),
        4,
        (
            PreemptionView(
                "2026-11-29T02:00:00Z", "job-a0", True, "a job of priority 9 of another tenant", False, 1, 0, 0.0
            ),
        ),
    )
    facade.cluster_view = ClusterView(
        (
            NodeView("n1", "ready", True, 8.0, 2.5, 32 << 30, 4 << 30, 4, 1, "a100", ("job-a1", "job-b7")),
            NodeView("n2", "ready", False, 8.0, 0.0, 32 << 30, 0, 0, 0, None),
        ),
        (TenantView("team-a", 3.0, 4, None, None, 1, 1, 2.5, 4 << 30, 1, 1),),
        (
            UsageRow("2026-11-28", "team-a", "pytorch", 2, 7200.5, 0.0),
            UsageRow("2026-11-29", "team-a", "pytorch", 1, 1800.25, 3600.0),
        ),
        "2026-11-29T03:04:00Z",
    )
    return facade


@pytest.fixture
def client(fake: FakeFacade, tokens: Tokens) -> Iterator[TestClient]:
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    with TestClient(create_app(fake, tokens.path, console=settings)) as made:
        yield made


def test_the_queue_page_shows_reason_places_and_what_frees_each_job(client: TestClient, tokens: Tokens) -> None:
    page = logged_in(client, tokens.tenant).get("/ui/queue")
    assert page.status_code == 200
    text = page.text
    assert "1 of yours; 3 of 4 in all (2 of other tenants ahead)" in text
    assert "quota: 1 running job of yours must end" in text and ">quota<" in text
    assert "a job of priority 9 of another tenant" in text
    assert '<a class="id" href="/ui/jobs/job-a0">job-a0</a>' in text
    assert "0 steps (checkpointed at its halt)" in text
    assert 'href="/ui/cluster"' not in text, "the nav shows Cluster to operators alone"


def test_a_tenants_session_cannot_open_the_cluster_page_or_its_csv(
    client: TestClient, fake: FakeFacade, tokens: Tokens
) -> None:
    logged_in(client, tokens.tenant)
    for path in ("/ui/cluster", "/ui/cluster/analytics.csv"):
        page = client.get(path)
        # what the operator's page shows of the cluster (a bare "n1" may be in the page's random CSRF token)
        assert page.status_code == 404 and "2.5 of 8" not in page.text and "a100" not in page.text, path
    assert ("cluster", "") not in fake.calls, "nothing of the cluster was read for a tenant"


def test_an_operator_reads_the_cluster_and_its_csv_holds_the_pages_rows(client: TestClient, tokens: Tokens) -> None:
    logged_in(client, tokens.operator)
    page = client.get("/ui/cluster")
    assert page.status_code == 200 and 'href="/ui/cluster"' in page.text
    assert "2.5 of 8" in page.text and "ready, drained" in page.text and "1 of 4 a100" in page.text
    holders = re.findall(r'<td data-label="Jobs holding room" class="jobs">(.*?)</td>', page.text)
    assert holders == ['<span class="id">job-a1</span> <span class="id">job-b7</span>', "none"]
    assert 'data-cpu-seconds="9000.75"' in page.text and ">2.50<" in page.text  # 9000.75 s: 2.50 CPU-hours
    download = client.get("/ui/cluster/analytics.csv")
    assert download.headers["content-type"].startswith("text/csv")
    assert "attachment" in download.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(download.text)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["day"], r["jobs"], float(r["cpu_seconds"]), float(r["gpu_seconds"])) for r in rows] == [
        ("2026-11-28", "2", 7200.5, 0.0),
        ("2026-11-29", "1", 1800.25, 3600.0),
    ]


def test_work_lost_in_words() -> None:
    assert lost_words(None, None) == "not measured yet"
    assert lost_words(0, 0.0) == "0 steps (checkpointed at its halt)"
    assert lost_words(12, 40.2) == "12 steps, 40 s of training"
    assert lost_words(None, 30.0) == "30 s of training (steps not measured)"
