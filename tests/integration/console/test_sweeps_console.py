"""The Sweeps view end to end: a small ASHA sweep (tests/integration/scheduler/test_sweeps.py's: four trials of a
deterministic learner, rungs at 2, 4 and 8 steps, eta 2) run on the Docker backend by a real scheduler whose loop
runs, the REST API and the console on uvicorn, the event hub following etcd; pages driven in Debian's chromium.

The sweep is halted and resumed from its page, which offers only the verbs its state takes, then followed live to its
end (no reload: its actions go); its rung table equals `learnerkit sweep status --output json`, a promoted trial's
curve shows each step once, brushing the parallel coordinates (on the canvas and with the inputs) filters the table;
axe on both pages, light and dark, at 375 px.

Note: the sweep is resumed only once its trials' halts have landed. A sweep resumed while a trial job is still
halting (one halted before its learner started) leaves that trial HALTED for good: `SweepDriver._resume` resumes only
trials whose job is HALTED at that moment; the test would then wait for an end that never comes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from playwright.sync_api import Page, expect

from learnerkit.cli import cli
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.events.hub import EventHub
from tests.integration.console.conftest import Pages, serving
from tests.integration.console.test_axe import _violations, axe_source
from tests.integration.console.test_live import events
from tests.integration.scheduler.conftest import Harness, learner_image, manifest, scheduler_buckets, service_options
from tests.integration.scheduler.test_sweeps import SEARCH, chunks, model_zip
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]
__all__ = ["axe_source", "learner_image", "scheduler_buckets", "service_options"]  # fixtures shared

ENDED = ("HALTED", "COMPLETED", "FAILED", "CANCELLED", "")
"""A trial job's statuses once a halt has landed ("": not deployed)."""


class Served:
    def __init__(self, url: str, token: str, harness: Harness, sweep_id: str, events: EventHub) -> None:
        self.url = url
        self.token = token
        self.harness = harness
        self.sweep_id = sweep_id
        self.events = events

    def sweep_statuses(self, after: str) -> list[str]:
        """The statuses of the sweep's own events on `/v1/events` after position ``after`` up to its first ``done``,
        each run of one status once (every batch of decisions rewrites the state)."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream", "Last-Event-ID": after}
        said: list[str] = []
        with requests.get(f"{self.url}/v1/events", headers=headers, stream=True, timeout=(5, 30)) as response:
            assert response.status_code == 200, response.text
            for event in events(response):
                item = json.loads(event["data"])
                if event["event"] != "sweep" or item.get("sweep_id") != self.sweep_id:
                    continue
                if not said or said[-1] != item["status"]:
                    said.append(str(item["status"]))
                if item["status"] == "done":
                    return said
        raise AssertionError(f"the stream ended before the sweep's done: {said}")

    def status_json(self) -> Any:
        env = {"LEARNERKIT_SCHEDULER_URL": self.url, "LEARNERKIT_TOKEN": self.token, "COLUMNS": "80"}
        result = CliRunner().invoke(cli, ["sweep", "status", self.sweep_id, "--output", "json"], env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)


@pytest.fixture(scope="module")
def served(
    etcd_server: Any,
    s3_server: Any,
    service_options: SchedulerOptions,
    scheduler_buckets: Any,
    learner_image: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("console-sweeps")
    token = add_token(folder / "tokens.json", "team-a")
    harness = Harness(etcd_server, service_options)
    text = manifest(s3_server, "python3 train.py --lr ${lr}")
    try:
        with serving(harness, folder / "tokens.json") as (url, hub):
            view = harness.call(
                harness.service.submit_sweep(
                    "team-a", SEARCH, text, image=learner_image, model=chunks(model_zip(folder))
                )
            )
            try:
                yield Served(url, token, harness, view.sweep_id, hub)
            finally:
                sweep = harness.call(harness.service.get_sweep("team-a", view.sweep_id))
                if sweep.status in ("running", "halted"):
                    harness.call(harness.service.cancel_sweep("team-a", view.sweep_id))
    finally:
        harness.kill()


def _act(page: Page, label: str) -> None:
    page.get_by_role("region", name="Actions").get_by_role("button", name=label).click()
    page.locator("form.confirm").get_by_role("button", name=label).click()


def _visible_jobs(page: Page) -> list[str]:
    found = page.locator("tbody[data-live=trials] tr:not([hidden])").evaluate_all("rs => rs.map(r => r.dataset.job)")
    return [str(job) for job in found]


def test_a_sweep_halted_resumed_and_followed_live_to_its_end_shows_what_sweep_status_says(
    served: Served, pages: Pages, axe_source: str
) -> None:
    page = pages.open()
    _log_in(page, served, f"/ui/sweeps/{served.sweep_id}")
    before = str(served.events.latest)
    status = page.locator("[data-live=header] h1 .status")
    offered = page.get_by_role("region", name="Actions").get_by_role("button")
    expect(offered).to_have_text(["Halt", "Cancel"])
    _act(page, "Halt")
    expect(status).to_have_text("halted")
    expect(offered).to_have_text(["Resume", "Cancel"])
    expect(page.get_by_role("status").filter(has_text="Halt asked for")).to_be_visible()
    # Resume once every trial's halt has landed: a trial still halting is not resumed (see the module's note).
    wait_until(
        lambda: all(t["job_status"] in ENDED for t in served.status_json()["trials"]),
        timeout=120,
        interval=0.5,
        message=lambda: f"the trials to halt: {served.status_json()['trials']}",
    )
    _act(page, "Resume")
    expect(status).to_have_text("running")
    # From here on the page is not reloaded: the sweep's end comes through the event stream.
    wait_until(
        lambda: status.inner_text() == "done",
        timeout=600,
        interval=1.0,
        message=lambda: f"the page to show the sweep done: {served.status_json()}",
    )
    final = served.status_json()
    assert final["status"] == "done"
    expect(page.locator("tbody[data-live=trials] tr")).to_have_count(len(final["trials"]))

    def table_equals_status() -> bool:
        for trial in served.status_json()["trials"]:
            row = page.locator(f'tbody[data-live=trials] tr[data-job="{trial["job_id"]}"]')
            cells = {
                label: row.locator(f'td[data-label="{label}"]').inner_text()
                for label in ("Rung", "Result", "State", "Why")
            }
            wanted = {
                "Rung": str(trial["rung"]),
                "Result": f"{trial['results'][-1]:.6g}" if trial["results"] else "—",
                "State": trial["state"],
                "Why": trial["reason"],
            }
            if cells != wanted or row.get_by_role("link").get_attribute("href") != f"/ui/jobs/{trial['job_id']}":
                return False
        return True

    wait_until(table_equals_status, timeout=60, interval=0.5, message="the rung table to equal sweep status")

    # A promoted trial's curve: every step of its budget once, though it trained over one attempt per rung.
    promoted = next(t for t in final["trials"] if len(t["results"]) >= 2)
    page.get_by_label("Trial", exact=True).select_option(promoted["job_id"])
    curve = page.locator(f'#curves figure[data-job="{promoted["job_id"]}"]')
    expect(curve).to_have_attribute("data-steps", str(promoted["budget"]))
    steps = [int(float(s)) for s in (curve.get_attribute("data-x") or "").split(",")]
    assert steps == list(range(1, promoted["budget"] + 1))
    expect(page.locator("#curves .hint")).to_contain_text("rung 1 at step 2")
    expect(page.locator("#curves .hint")).to_contain_text("promoted")

    # Brushing: the inputs, then a drag on the canvas along the learning rate's axis.
    by_lr = {t["parameters"]["lr"]: t["job_id"] for t in final["trials"]}
    page.get_by_label("lr from").select_option("0.2")
    page.get_by_label("lr to").select_option("0.2")
    expect(page.locator("[data-live=shown]")).to_contain_text("1 of 4 trials shown")
    assert _visible_jobs(page) == [by_lr["0.2"]]
    page.get_by_role("button", name="Clear every range").click()
    expect(page.locator("[data-live=shown]")).to_have_text("4 trials")
    canvas = page.locator("#parallel canvas")
    box = canvas.bounding_box()
    assert box is not None
    x = box["x"] + 46  # parcoords.js: SIDE, TOP and the axes' height place a value

    def y_of(t: float) -> float:
        return box["y"] + 34 + (1 - t) * 260

    page.mouse.move(x, y_of(0.25))
    page.mouse.down()
    page.mouse.move(x, y_of(0.5), steps=3)
    page.mouse.move(x, y_of(0.75), steps=3)
    page.mouse.up()
    expect(page.locator("[data-live=shown]")).to_contain_text("2 of 4 trials shown")
    assert sorted(_visible_jobs(page)) == sorted([by_lr["0.2"], by_lr["0.3"]])
    assert float(page.locator("#parallel").get_attribute("data-filter-ms") or "inf") < 1000
    expect(page.get_by_label("lr from")).to_have_value("0.2")
    # A done sweep takes no verb: the live update that showed it done took its actions away.
    expect(page.get_by_role("region", name="Actions")).to_have_count(0)
    pages.shot(page, "sweep-1280")  # docs/images/console-sweep.png
    # The sweep's own record made its events, in order: halted from the page, resumed, done.
    assert served.sweep_statuses(before) == ["halted", "running", "done"]

    found: dict[str, Any] = {}
    for dark in (False, True):
        for width in (1280, 375):
            look = pages.open(dark=dark, width=width)
            _log_in(look, served, "/ui/sweeps")
            expect(look.locator(f'tr[data-sweep="{served.sweep_id}"]')).to_contain_text("done")
            found[f"list {dark} {width}"] = _violations(look, axe_source)
            if (dark, width) == (False, 1280):
                pages.shot(look, "sweeps-1280")
                look.set_viewport_size({"width": 800, "height": 900})
                pages.shot(look, "sweeps-800")
                look.set_viewport_size({"width": 1280, "height": 900})
            look.goto(f"{served.url}/ui/sweeps/{served.sweep_id}")
            expect(look.locator("#parallel canvas")).to_have_count(1)
            expect(look.locator("#best .plot canvas")).to_have_count(1)
            found[f"sweep {dark} {width}"] = _violations(look, axe_source)
            if (dark, width) == (False, 1280):
                narrow = pages.open(width=800)
                _log_in(narrow, served, f"/ui/sweeps/{served.sweep_id}")
                expect(narrow.locator("#best .plot canvas")).to_have_count(1)
                pages.shot(narrow, "sweep-800")
            if width == 375:
                wide = look.evaluate("document.documentElement.scrollWidth")
                assert wide <= 375 + 1, f"the sweep page scrolls sideways at 375 px: {wide}"
    broken = {name: v for name, v in found.items() if v}
    assert not broken, json.dumps(broken, indent=1)


def _log_in(page: Page, served: Served, path: str) -> None:
    page.goto(served.url + path)
    page.get_by_label("Tenant token").fill(served.token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()
