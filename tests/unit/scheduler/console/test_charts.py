"""The job page's charts' data under ``/ui/`` (the session cookie, JSON errors) and its evaluations' verdicts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit.scheduler.facade import EvaluationView, LearnerView
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade, view

HISTORY = b"".join(json.dumps({"step": s, "values": {"loss": 1 / (s + 1)}}).encode() + b"\n" for s in range(300))


@pytest.fixture
def browser(fake: FakeFacade, tenants: Tenants) -> Iterator[TestClient]:
    evaluations = (
        EvaluationView("robust", "robustness", "passed"),
        EvaluationView("fair", "fairness", "failed", message="disparate_impact 0.31, wants >= 0.8"),
    )
    model = "rejected (fair: disparate_impact 0.31, wants >= 0.8)"
    fake.add(view("a-1", "team-a", "COMPLETED", evaluations=evaluations, model=model), metrics=HISTORY)
    fake.add(view("b-1", "team-b", "COMPLETED"), metrics=HISTORY)
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    with TestClient(create_app(fake, tenants.path, console=settings)) as client:
        form = client.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        client.post("/ui/login", data={"csrf": csrf.group(1), "token": tenants.a})
        yield client


def test_the_series_are_served_with_the_session(browser: TestClient) -> None:
    index = browser.get("/ui/jobs/a-1/series")
    assert index.json()["series"] == [{"name": "loss", "steps": 300, "times": 0}]
    window = browser.get("/ui/jobs/a-1/series/loss", params={"points": 100, "from": 10, "to": 19}).json()
    assert window["x"] == list(range(10, 20)) and window["total"] == 300


def test_errors_are_json_and_another_tenants_job_is_not_found(browser: TestClient) -> None:
    for path in ("/ui/jobs/b-1/series", "/ui/jobs/b-1/series/loss", "/ui/jobs/none/series/loss"):
        answer = browser.get(path)
        assert answer.status_code == 404 and answer.json()["error"] == "not_found"
        assert "team-b" not in answer.text
    bad = browser.get("/ui/jobs/a-1/series/loss", params={"from": 5, "to": 1})
    assert (bad.status_code, bad.json()["message"]) == (400, "from: must not be after to; got from=5, to=1")
    unknown = browser.get("/ui/jobs/a-1/series/acc")
    assert unknown.status_code == 404 and "(it has: loss)" in unknown.json()["message"]


def test_without_a_session_the_series_lead_to_the_login(fake: FakeFacade, tenants: Tenants) -> None:
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    fake.add(view("a-1", "team-a", "COMPLETED"), metrics=HISTORY)
    with TestClient(create_app(fake, tenants.path, console=settings)) as client:
        answer = client.get("/ui/jobs/a-1/series/loss", follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login?next=")


def test_the_job_page_shows_the_verdicts_and_loads_the_charts_script(browser: TestClient) -> None:
    page = browser.get("/ui/jobs/a-1")
    assert page.status_code == 200
    assert "rejected (fair: disparate_impact 0.31, wants &gt;= 0.8)" in page.text
    rows = re.findall(r'<td data-label="Evaluation">(\w+)</td>.*?class="outcome o-(\w+)"', page.text, re.S)
    assert rows == [("robust", "passed"), ("fair", "failed")]
    assert '<script src="/ui/static/charts.js" defer></script>' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/ui/static/charts.js", "/ui/static/vendor/uPlot.iife.min.js", "/ui/static/vendor/uPlot.min.css"):
        assert browser.get(asset).status_code == 200, asset


def test_the_charts_learner_is_chosen_on_the_page_and_its_series_are_served(
    fake: FakeFacade, tenants: Tenants, browser: TestClient
) -> None:
    two = (LearnerView(learner_id=1, status="COMPLETED"), LearnerView(learner_id=2, status="COMPLETED"))
    fake.add(view("a-2", "team-a", "COMPLETED", learners=two), metrics=HISTORY)
    page = browser.get("/ui/jobs/a-2?learner=2")
    assert re.search(r'<select name="learner" id="chart-learner">.*<option value="2" selected>2</option>', page.text)
    assert 'data-learner="2"' in page.text and "learner 2's metric history" in page.text
    assert browser.get("/ui/jobs/a-2/series?learner=2").json()["series"] == []
    assert [s["name"] for s in browser.get("/ui/jobs/a-2/series?learner=1").json()["series"]] == ["loss"]
    assert 'id="chart-learner"' not in browser.get("/ui/jobs/a-1").text, "one learner: nothing to choose"
