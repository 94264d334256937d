"""Details seen in review, in Debian's chromium against a real scheduler (a sweep's records and its trial jobs
written to the real etcd, their histories in the real SeaweedFS): job ids whole in the Jobs list at 1280 and 800
px; a sweep's learning curve ticked at whole steps; the best-so-far chart's times in UTC in a browser of another
zone; no pause drawn for a trial the scheduler started again at once; charts that follow the window's width; a bad
``limit`` the console's error page in the API's words. Screenshots at 1280 and 800 px, axe on each page."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, save_attempt
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.sweeps.decisions import TrialRecord, TrialState
from learnerkit.scheduler.sweeps.store import StoredTrial, SweepSpecRecord, SweepState, SweepStatus, SweepStore
from learnerkit.scheduler.sweeps.trialids import trial_job_id
from tests.integration.console.conftest import BUCKET, Console, Pages, _manifest, log_in
from tests.integration.console.test_axe import AXE, _violations

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

SWEEP = "sweep-d37a1151"
TRIALS = (trial_job_id(SWEEP, 0), trial_job_id(SWEEP, 1))
SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: [0.1, 0.03]}
objective: {metric: loss, goal: minimize}
budget: {unit: step, min: 4, max: 8}
algorithm: {name: random}
trials: 2
"""
STEPS = 8
"""Few steps: uPlot's own ticks on an axis 1 to 8 wide fall at halves."""
ENDS = ("2027-01-15T09:10:00+00:00", "2027-01-15T09:05:00+00:00")
"""Each trial's rung result comes as its last attempt ends."""
ZONE = "Pacific/Chatham"
"""UTC+13:45 in January: no clock reads the same there."""


@pytest.fixture(scope="module")
def seed(s3_server: Any) -> Callable[[EtcdStore, JobStore], Awaitable[None]]:
    """A done sweep of two trials: t0 failed once and was started again by the scheduler in the same second
    (RESTARTED: never paused), then completed; t1 completed its one attempt."""
    s3 = s3_server.client()
    text = _manifest(s3_server, "mnist-sweep")

    async def write(etcd: EtcdStore, store: JobStore) -> None:
        sweeps = SweepStore(etcd, store.root)
        await sweeps.create(
            SweepSpecRecord(SWEEP, "team-a", 1_900_000_000.0, SEARCH, "search.yml", text, "manifest.yml")
        )
        trials = [
            StoredTrial(TrialRecord(i, TrialState.COMPLETED, 0, (0.5 - 0.2 * i,)), job_id, {"lr": (0.1, 0.03)[i]})
            for i, job_id in enumerate(TRIALS)
        ]
        await sweeps.record(SWEEP, SweepState(SweepStatus.DONE), [], trials)
        for i, job_id in enumerate(TRIALS):
            spec = {
                "manifest": parse_manifest(text, "manifest.yml", None).to_dict(),
                "tenant": "team-a",
                "job_id": job_id,
            }
            state = JobState(job_id, "team-a", "mnist-sweep", 1_900_000_000.0 + i)
            await store.create(state, spec, text, "manifest.yml")
            first = Attempt(1, ("node-1",), "2027-01-15T09:00:00+00:00")
            if i == 0:
                await save_attempt(
                    store, job_id, first.ended(AttemptEnd.RESTARTED, "exit 1", "2027-01-15T09:02:00+00:00")
                )
                first = Attempt(2, ("node-1",), "2027-01-15T09:02:00+00:00")
            await save_attempt(store, job_id, first.ended(AttemptEnd.COMPLETED, "done", ENDS[i]))
            await store.save(state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, attempt=first.number))
            history = b"".join(
                b'{"step": %d, "time": %d, "values": {"loss": %.4f}}\n' % (s, 1_900_000_000 + s, 1 / s)
                for s in range(1, STEPS + 1)
            )
            s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-1/learner-1/logs/metrics.jsonl", Body=history)

    return write


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: scripts/setup.sh installs the console's npm packages (scripts/frontend.sh)")
    return AXE.read_text()


def _cut_ids(page: Page, selector: str) -> list[str]:
    """The ids among ``selector``'s elements drawn on more than one line (wrapped) or clipped."""
    return list(
        page.evaluate(
            """(selector) => [...document.querySelectorAll(selector)]
                 .filter(e => e.getClientRects().length > 1 || e.scrollWidth > e.clientWidth + 1
                              || e.getBoundingClientRect().height > 1.6 * parseFloat(getComputedStyle(e).lineHeight))
                 .map(e => e.textContent)""",
            selector,
        )
    )


def _sideways(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth"))


def test_job_ids_are_never_wrapped_in_the_list(console: Console, pages: Pages, axe_source: str) -> None:
    page = pages.open()
    log_in(page, console)
    for width in (1280, 800):
        page.set_viewport_size({"width": width, "height": 900})
        expect(page.locator("table.jobs td.id a").first).to_be_visible()
        assert _cut_ids(page, "table.jobs td.id a") == [], f"every id on one line at {width} px"
        assert not _sideways(page), f"the page does not scroll sideways at {width} px"
        hidden = page.evaluate("(e => e.scrollWidth - e.clientWidth)(document.querySelector('.scroll'))")
        assert hidden <= 1, f"the whole table shows at {width} px, its Compare column too ({hidden} px hidden)"
        pages.shot(page, f"jobs-{width}")
    assert not _violations(page, axe_source)


def _chart_widths(page: Page) -> list[tuple[str, float, float]]:
    """Each drawn chart's id, its canvas's width and its box's, in CSS pixels."""
    return [
        tuple(w)
        for w in page.evaluate(
            """[...document.querySelectorAll('.plotted .plot')].filter(p => p.querySelector('canvas')).map(p =>
                 [p.closest('.plotted').id, p.querySelector('canvas').getBoundingClientRect().width,
                  p.getBoundingClientRect().width])"""
        )
    ]


def test_a_sweeps_plots_tick_whole_steps_show_utc_follow_the_window_and_pause_only_where_paused(
    console: Console, pages: Pages, axe_source: str
) -> None:
    page = pages.open(timezone=ZONE)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, console, path=f"/ui/sweeps/{SWEEP}")
    curve = page.locator("#curves figure.chart")
    expect(curve).to_have_attribute("data-steps", str(STEPS))
    ticks = (curve.get_attribute("data-x-ticks") or "").split()
    assert ticks and all(t.isdigit() for t in ticks), f"whole steps only: {ticks}"

    best = page.locator("#best .plot .u-over")
    best.scroll_into_view_if_needed()
    box = best.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    shown = page.locator("#best .u-legend .u-series").first.locator(".u-value").inner_text()
    utc = [datetime.fromisoformat(end).astimezone(UTC) for end in ENDS]
    assert shown in {f"{t:%Y-%m-%d} {t.hour % 12 or 12}:{t:%M}{'am' if t.hour < 12 else 'pm'}" for t in utc}, shown
    expect(page.locator("#best figure .hint")).to_contain_text("times in UTC")

    restarted = page.locator(f'table.timelines tr[data-job="{TRIALS[0]}"] li')
    expect(restarted).to_have_text(["running 120 s", "resumed 480 s"])

    widths = _chart_widths(page)
    assert len(widths) == 3 and all(canvas <= plot + 1 for _, canvas, plot in widths), widths
    pages.shot(page, "sweep-1280")
    page.set_viewport_size({"width": 800, "height": 900})
    page.wait_for_function(
        """() => [...document.querySelectorAll('.plotted .plot canvas')].every(c =>
             c.getBoundingClientRect().width <= c.closest('.plot').getBoundingClientRect().width + 1)"""
    )
    narrow = _chart_widths(page)
    assert all(canvas < wide for (_, canvas, _), (_, wide, _) in zip(narrow, widths, strict=True)), narrow
    assert not _sideways(page), "the charts follow the window: no sideways scrolling at 800 px"
    pages.shot(page, "sweep-800")
    assert not _violations(page, axe_source)
    assert errors == []


def test_a_bad_limit_is_the_consoles_error_page_in_the_apis_words(
    console: Console, pages: Pages, axe_source: str
) -> None:
    request = urllib.request.Request(
        console.url + "/v1/sweeps?limit=abc", headers={"Authorization": f"Bearer {console.token}"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    words = json.loads(refused.value.read())["message"]
    page = pages.open(width=800)
    log_in(page, console)
    for path in ("/ui/jobs?limit=abc", "/ui/sweeps?limit=abc", f"/ui/sweeps/{SWEEP}?limit=abc"):
        answer = page.goto(console.url + path)
        assert answer is not None and answer.status == refused.value.code == 422
        expect(page.get_by_role("heading", level=1)).to_have_text("Bad address")
        expect(page.locator("main .error")).to_have_text(words)
    pages.shot(page, "bad-limit-800")
    assert not _violations(page, axe_source)
