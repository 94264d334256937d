"""The sweep pages' data (`console.sweeps_views`): a curve with each step once, rung marks, timeline segments,
best so far, the plots' axes; and the sweep page over the fake facade (its rung table, another tenant's sweep)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit.scheduler.console.sweeps_views import (
    REQUEUED_ENDS,
    best_so_far,
    marks,
    plot_data,
    segments,
    thin,
    trial_row,
    unique_steps,
)
from learnerkit.scheduler.facade import AttemptView, ParameterView, SweepView, TrialView
from learnerkit.scheduler.jobs.attempts import REQUEUED_ENDS as SCHEDULERS_REQUEUED_ENDS
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade

WHY = "rung 2: 4th of 9, the top 3 continue"


def trial(index: int, state: str, rung: int, results: tuple[float, ...], **parameters: float | str) -> TrialView:
    return TrialView(
        index=index,
        job_id=f"sweep-0a1b2c3d-t{index:04d}",
        state=state,
        rung=rung,
        budget=(2, 4, 8)[rung - 1],
        results=results,
        reason=WHY if index == 3 else f"rung {rung}",
        parameters=dict(parameters),
    )


def sweep(*trials: TrialView, tenant: str = "team-a", unit: str = "step") -> SweepView:
    return SweepView(
        "sweep-0a1b2c3d",
        tenant,
        "running",
        "",
        "asha",
        "val_loss",
        "minimize",
        unit,
        (2, 4, 8),
        9,
        2,
        "2026-11-29T04:00:00+00:00",
        trials=trials,
        space=(
            ParameterView("lr", "log_uniform", 1e-4, 1e-1),
            ParameterView("opt", "choice", values=("sgd", "adam")),
        ),
    )


def test_a_resumed_attempt_that_logs_steps_again_shows_each_step_once_its_later_value_standing() -> None:
    # Attempt 1 logged steps 1-4; attempt 2 resumed from step 3's checkpoint and logged 3-6 again.
    steps = [1, 2, 3, 4, 3, 4, 5, 6]
    values = [1.0, 0.9, 0.8, 0.7, 0.81, 0.71, 0.6, 0.5]
    x, y = unique_steps(steps, values)
    assert x == [1, 2, 3, 4, 5, 6]
    assert y == [1.0, 0.9, 0.81, 0.71, 0.6, 0.5]
    assert unique_steps([], []) == ([], [])


def test_a_long_curve_is_thinned_keeping_its_last_point() -> None:
    x = [float(n) for n in range(10_001)]
    thinned, _ = thin(x, x, points=100)
    assert len(thinned) <= 101 and thinned[0] == 0 and thinned[-1] == 10_000
    assert thin([1.0], [2.0]) == ([1.0], [2.0])


def test_marks_say_where_a_trial_paused_was_promoted_or_stopped() -> None:
    view = sweep()
    promoted_twice = trial(0, "completed", 3, (0.5, 0.4, 0.3))
    wanted = [(2, "promoted"), (4, "promoted"), (8, "end")]
    assert [(m["step"], m["kind"]) for m in marks(view, promoted_twice)] == wanted
    paused = trial(1, "paused", 1, (0.9,))
    assert [(m["step"], m["kind"]) for m in marks(view, paused)] == [(2, "paused")]
    running_rung_two = trial(2, "running", 2, (0.6,))
    assert [m["kind"] for m in marks(view, running_rung_two)] == ["promoted"]
    stopped = trial(3, "stopped", 2, (0.6, 0.7))
    assert [(m["rung"], m["kind"]) for m in marks(view, stopped)] == [(1, "promoted"), (2, "stopped")]
    assert marks(sweep(unit="epoch"), promoted_twice) == []


def at(minute: int) -> str:
    return datetime(2026, 11, 29, 4, minute, tzinfo=UTC).isoformat()


def test_timeline_segments_run_pause_resume_and_stop() -> None:
    attempts = [
        AttemptView(1, started_at=at(0), ended_at=at(2), ended_by="HALTED"),
        AttemptView(2, started_at=at(5), ended_at=at(9), ended_by="HALTED", resumed_from=1),
    ]
    found = segments(attempts, "stopped")
    assert [(s.kind, s.seconds) for s in found] == [
        ("running", 120.0),
        ("paused", 180.0),
        ("resumed", 240.0),
        ("stopped", 0.0),
    ]
    still_paused = segments(attempts[:1], "paused", now=datetime(2026, 11, 29, 4, 3, tzinfo=UTC))
    assert [(s.kind, s.end, s.seconds) for s in still_paused] == [("running", at(2), 120.0), ("paused", "", 60.0)]
    running = segments([AttemptView(1, started_at=at(0))], "running", now=datetime(2026, 11, 29, 4, 1, tzinfo=UTC))
    assert [(s.kind, s.seconds) for s in running] == [("running", 60.0)]
    assert segments([], "pending") == []


def test_best_so_far_follows_each_rungs_result_in_time_order() -> None:
    view = sweep(trial(0, "paused", 1, (0.5,)), trial(1, "running", 2, (0.7, 0.3)))
    attempts = {
        "sweep-0a1b2c3d-t0000": (AttemptView(1, started_at=at(0), ended_at=at(3), ended_by="HALTED"),),
        "sweep-0a1b2c3d-t0001": (
            AttemptView(1, started_at=at(0), ended_at=at(2), ended_by="HALTED"),
            AttemptView(2, started_at=at(4), ended_at=at(6), ended_by="HALTED", resumed_from=1),
        ),
    }
    assert best_so_far(view, attempts) == [(at(2), 0.7), (at(3), 0.5), (at(6), 0.3)]


def test_the_plots_axes_are_log_for_log_scaled_parameters_and_categorical_for_choices() -> None:
    data = plot_data(sweep(trial(0, "paused", 1, (0.5,), lr=0.01, opt="adam"), trial(1, "pending", 1, ())))
    assert data["axes"] == [
        {"name": "lr", "kind": "log", "low": 1e-4, "high": 1e-1},
        {"name": "opt", "kind": "choice", "values": ["sgd", "adam"]},
    ]
    assert [t["values"] for t in data["trials"]] == [[0.01, "adam"], [None, None]]
    assert [t["objective"] for t in data["trials"]] == [0.5, None]
    assert data["best"] == "0.5"


def test_a_trials_row_holds_what_sweep_status_says() -> None:
    row = trial_row(trial(3, "paused", 2, (0.61, 0.4567891234), lr=0.012345, opt="sgd"))
    assert (row.job_id, row.rung, row.result, row.state, row.reason) == (
        "sweep-0a1b2c3d-t0003",
        2,
        "0.456789",
        "paused",
        WHY,
    )
    assert row.parameters == "lr=0.01235, opt=sgd"


@pytest.fixture
def fake() -> FakeFacade:
    return FakeFacade()


@pytest.fixture
def browser(tenants: Tenants, fake: FakeFacade) -> Iterator[TestClient]:
    fake.sweeps["sweep-0a1b2c3d"] = sweep(trial(3, "paused", 2, (0.6, 0.5), lr=0.01, opt="adam"))
    fake.sweeps["sweep-ffffffff"] = SweepView(
        "sweep-ffffffff", "team-b", "running", "", "asha", "loss", "minimize", "step", (1,), 1, 1, ""
    )
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    with TestClient(create_app(fake, tenants.path, console=settings)) as client:
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/login").text)
        assert csrf is not None
        client.post("/ui/login", data={"csrf": csrf.group(1), "token": tenants.a})
        yield client


def test_the_sweep_page_shows_its_rung_table_and_another_tenants_sweep_is_not_found(browser: TestClient) -> None:
    page = browser.get("/ui/sweeps/sweep-0a1b2c3d")
    assert page.status_code == 200
    assert '<a href="/ui/jobs/sweep-0a1b2c3d-t0003">sweep-0a1b2c3d-t0003</a>' in page.text
    assert WHY in page.text and "0.5" in page.text
    data = browser.get("/ui/sweeps/sweep-0a1b2c3d/data").json()
    assert [t["job_id"] for t in data["trials"]] == ["sweep-0a1b2c3d-t0003"]
    other = browser.get("/ui/sweeps/sweep-ffffffff")
    assert other.status_code == 404 and "There is no sweep 'sweep-ffffffff'." in html.unescape(other.text)
    assert browser.get("/ui/sweeps/sweep-ffffffff/data").status_code == 404


def test_a_sweep_action_asks_first_and_refuses_without_the_csrf_token(browser: TestClient) -> None:
    page = browser.get("/ui/sweeps/sweep-0a1b2c3d").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    asked = browser.post("/ui/sweeps/sweep-0a1b2c3d/actions/halt", data={"csrf": csrf.group(1)})
    assert asked.status_code == 200 and "No trial starts or is promoted" in asked.text
    assert 'name="confirmed" value="yes"' in asked.text
    refused = browser.post("/ui/sweeps/sweep-0a1b2c3d/actions/halt", data={"confirmed": "yes"})
    assert refused.status_code == 403


def _offered(page: str) -> list[str]:
    return re.findall(r'action="/ui/sweeps/sweep-0a1b2c3d/actions/(\w+)"', page)


@pytest.mark.parametrize(
    ("status", "offered"),
    [
        ("running", ["halt", "cancel"]),
        ("halted", ["resume", "cancel"]),
        ("done", []),
        ("cancelled", []),
        ("failed", []),
    ],
)
def test_a_sweep_page_offers_only_the_verbs_its_state_takes(
    browser: TestClient, fake: FakeFacade, status: str, offered: list[str]
) -> None:
    fake.sweeps["sweep-0a1b2c3d"] = replace(fake.sweeps["sweep-0a1b2c3d"], status=status)
    page = browser.get("/ui/sweeps/sweep-0a1b2c3d").text
    assert _offered(page) == offered
    assert ('aria-label="Actions"' in page) == bool(offered), "no empty Actions region"


def _walk(browser: TestClient, address: str, pattern: str) -> list[list[str]]:
    """Each page's ids, following Next page from ``address`` to the last page."""
    pages: list[list[str]] = []
    while address:
        page = browser.get(address)
        assert page.status_code == 200, page.text
        pages.append(re.findall(pattern, page.text))
        found = re.search(r'<a href="([^"]+)" rel="next">Next page</a>', page.text)
        address = html.unescape(found.group(1)) if found else ""
    return pages


def test_a_sweeps_trials_are_paged_as_the_jobs_list_is(browser: TestClient, fake: FakeFacade) -> None:
    many = tuple(trial(i, "running", 1, (), lr=0.01) for i in range(120))
    fake.sweeps["sweep-0a1b2c3d"] = replace(fake.sweeps["sweep-0a1b2c3d"], trials=many)
    pages = _walk(browser, "/ui/sweeps/sweep-0a1b2c3d?limit=50", r'<tr data-trial="\d+" data-job="([^"]+)"')
    assert [len(p) for p in pages] == [50, 50, 20]
    assert [one for page in pages for one in page] == [t.job_id for t in many], "each trial once, in order"
    second = browser.get("/ui/sweeps/sweep-0a1b2c3d?limit=50").text
    assert "1\N{EN DASH}50 of 120" in second and "First page" not in second
    assert "50 trials on this page, of 120" in second
    assert '<option value="50" selected>' in second
    bad = browser.get("/ui/sweeps/sweep-0a1b2c3d?next=not-a-token")
    assert bad.status_code == 400 and "next: 'not-a-token' is not a next token of this list" in html.unescape(bad.text)
    fake.sweeps["sweep-00000001"] = replace(fake.sweeps["sweep-0a1b2c3d"], sweep_id="sweep-00000001", trials=())
    lists = re.search(r'href="/ui/sweeps\?limit=1&amp;next=([^"]+)"', browser.get("/ui/sweeps?limit=1").text)
    assert lists is not None, "the sweeps list's own next token"
    other = browser.get(f"/ui/sweeps/sweep-0a1b2c3d?next={lists.group(1)}")
    assert other.status_code == 400, "the list's token is not the trials'"


def test_the_sweeps_list_is_paged_newest_first(browser: TestClient, fake: FakeFacade) -> None:
    base = fake.sweeps["sweep-0a1b2c3d"]
    for n in range(60):
        sweep_id = f"sweep-{n:08x}"
        fake.sweeps[sweep_id] = replace(
            base, sweep_id=sweep_id, submitted_at=f"2026-11-{1 + n // 24:02d}T{n % 24:02d}:00:00+00:00"
        )
    del fake.sweeps["sweep-0a1b2c3d"]
    pages = _walk(browser, "/ui/sweeps?limit=25", r'<tr data-sweep="([^"]+)"')
    assert [len(p) for p in pages] == [25, 25, 10]
    assert [one for page in pages for one in page] == [f"sweep-{n:08x}" for n in reversed(range(60))]
    assert "60 sweeps" in browser.get("/ui/sweeps?limit=25").text


@pytest.mark.parametrize(
    ("address", "api"),
    [
        ("/ui/jobs?limit=abc", "/v1/jobs?limit=abc"),
        ("/ui/jobs?limit=0", "/v1/jobs?limit=0"),
        ("/ui/jobs?limit=100000", "/v1/jobs?limit=100000"),
        ("/ui/sweeps?limit=abc", "/v1/sweeps?limit=abc"),
        ("/ui/sweeps/sweep-0a1b2c3d?limit=0", "/v1/sweeps?limit=0"),
        ("/ui/jobs/a-1?attempt=0", "/v1/jobs/a-1/logs?attempt=0"),
        ("/ui/jobs/a-1/log?attempt=1&end=-1", "/v1/jobs/a-1/logs?attempt=1&offset=-1"),
    ],
)
def test_a_bad_query_parameter_is_the_consoles_error_page_in_the_apis_words(
    browser: TestClient, tenants: Tenants, address: str, api: str
) -> None:
    page = browser.get(address)
    answer = browser.get(api, headers={"Authorization": f"Bearer {tenants.a}"})
    assert page.status_code == answer.status_code == 422, page.text
    assert page.headers["content-type"].startswith("text/html")
    words = answer.json()["message"].replace("offset", "end")
    assert f'<p class="error">{html.escape(words)}</p>' in page.text
    assert "Log out" in page.text, "the console's layout, its session's bar"


def test_a_scripts_bad_query_is_still_answered_as_json(browser: TestClient) -> None:
    answer = browser.get("/ui/compare/series?jobs=a,b&points=1", headers={"Accept": "application/json"})
    assert answer.status_code == 422 and answer.json()["error"] == "bad_request"


def test_a_trial_never_paused_shows_no_pause() -> None:
    """A gap between attempts is a pause only where the trial stopped at its rung or was halted (COMPLETED,
    HALTED); one the scheduler requeued by itself waited in the queue, and one started again at once has no gap."""
    restarted = [
        AttemptView(1, started_at=at(0), ended_at=at(2), ended_by="RESTARTED"),
        AttemptView(2, started_at=at(2), ended_at=at(4), ended_by="COMPLETED"),
    ]
    assert [(s.kind, s.seconds) for s in segments(restarted, "done")] == [("running", 120.0), ("resumed", 120.0)]
    preempted = [
        AttemptView(1, started_at=at(0), ended_at=at(2), ended_by="PREEMPTED"),
        AttemptView(2, started_at=at(5), resumed_from=1),
    ]
    found = segments(preempted, "running", now=datetime(2026, 11, 29, 4, 6, tzinfo=UTC))
    assert [(s.kind, s.seconds) for s in found] == [("running", 120.0), ("requeued", 180.0), ("resumed", 60.0)]


def test_the_requeued_ends_are_the_schedulers() -> None:
    assert {end.value for end in SCHEDULERS_REQUEUED_ENDS} == REQUEUED_ENDS
