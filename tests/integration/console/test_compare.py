"""The Compare page in Debian's chromium against a real scheduler: two trials of a sweep (its records and their jobs
written to the real etcd as the scheduler writes them, restored by it; their histories and signed provenance in the
real SeaweedFS) differing in one parameter, picked from the Jobs list; that key alone marked, the curves drawn, axe
clean; another tenant's job refused as an unknown one; 51 jobs refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.common.signing import create_signer, sign_statement
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
from tests.integration.console.test_charts import _drag
from tests.integration.console.test_live import put_status

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

SWEEP = "sweep-c0ffee01"
TRIALS = (trial_job_id(SWEEP, 0), trial_job_id(SWEEP, 1))
RATES = (0.1, 0.03)
SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: [0.1, 0.03]}
  width: {type: choice, values: [64]}
objective: {metric: loss, goal: minimize}
budget: {unit: step, min: 100, max: 100}
algorithm: {name: random}
trials: 2
"""
STEPS = 2_000


@pytest.fixture(scope="module")
def seed(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Callable[[EtcdStore, JobStore], Awaitable[None]]:
    """A done sweep of two trials, same manifest, lr 0.1 and 0.03; each trial job HALTED after one attempt, with
    its metric history and its provenance signed by one platform key."""
    signer = create_signer(tmp_path_factory.mktemp("key") / "signing-key.pem")
    s3 = s3_server.client()
    text = _manifest(s3_server, "mnist-sweep")

    async def write(etcd: EtcdStore, store: JobStore) -> None:
        sweeps = SweepStore(etcd, store.root)
        await sweeps.create(
            SweepSpecRecord(SWEEP, "team-a", 1_900_000_000.0, SEARCH, "search.yml", text, "manifest.yml")
        )
        trials = [
            StoredTrial(TrialRecord(i, TrialState.COMPLETED, 0, (0.5,)), job_id, {"lr": RATES[i], "width": 64})
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
            attempt = Attempt(1, ("node-1",), "2027-01-15T09:00:00+00:00")
            await save_attempt(store, job_id, attempt.ended(AttemptEnd.HALTED, "halted", "2027-01-15T09:20:00+00:00"))
            await store.save(state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, attempt=1, reason="halted"))
            history = b"".join(
                b'{"step": %d, "time": %d, "values": {"loss": %.6f, "accuracy": %.6f}}\n'
                % (s, 1_900_000_000 + s, 2 / (s * RATES[i] + 1), 1 - 1 / (s * RATES[i] + 1))
                for s in range(1, STEPS + 1)
            )
            s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-1/learner-1/logs/metrics.jsonl", Body=history)
            envelope = sign_statement(_statement(job_id), signer)
            s3.put_object(Bucket=BUCKET, Key=f"{job_id}/provenance/provenance.intoto.json", Body=json.dumps(envelope))

    return write


def _statement(job_id: str) -> dict[str, Any]:
    """What the two trials ran, the same for both: the images, the data and one result file."""
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "attempt-1/learner-1/results/model.pt", "digest": {"sha256": "ab" * 32}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "internalParameters": {"jobId": job_id, "status": "HALTED", "complete": True},
                "resolvedDependencies": [
                    {
                        "name": "learner-image",
                        "uri": "docker-image://learnerkit/pytorch:2.13",
                        "digest": {"sha256": "1" * 64},
                    },
                    {
                        "name": "sidecar-image",
                        "uri": "docker-image://learnerkit/sidecar:1",
                        "digest": {"sha256": "2" * 64},
                    },
                    {"name": f"data:s3://{BUCKET}/train.csv", "digest": {"sha256": "3" * 64}},
                ],
            }
        },
    }


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: scripts/setup.sh installs the console's npm packages (scripts/frontend.sh)")
    return AXE.read_text()


def _differing(page: Page) -> list[str]:
    return [row.get_attribute("data-key") or "" for row in page.locator("table.diff tr.differs").all()]


def test_two_trials_picked_from_the_list_differ_in_that_parameter_alone(
    console: Console, pages: Pages, axe_source: str
) -> None:
    page = pages.open()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, console)
    for job_id in TRIALS:
        page.get_by_label(f"Compare {job_id}").check()
    page.get_by_role("button", name="Compare the ticked jobs").click()
    page.wait_for_url(f"**/ui/compare?jobs={TRIALS[1]},{TRIALS[0]}")  # newest first, as the list shows them

    assert _differing(page) == ["lr"], "the one parameter that differs, and nothing else"
    expect(page.locator('tr[data-key="lr"] .mark')).to_have_text("differs")
    expect(page.locator('tr[data-key="lr"] td')).to_have_text(["0.03", "0.1"])
    expect(page.locator('tr[data-key="width"]')).to_have_count(0)

    charts = page.locator("figure.chart")
    expect(charts).to_have_count(2)
    expect(page.locator("#compare-charts")).to_have_attribute("data-drawn", "2")
    loss = page.locator('figure.chart[data-series="loss"]')
    expect(loss.locator("canvas")).to_have_count(1)
    sent = int(loss.get_attribute("data-points") or 0)
    assert 2 * 100 <= sent < 2 * STEPS, "each job's series thinned on the server"
    legend = page.locator(".compare-legend")
    for job_id in TRIALS:
        expect(legend.get_by_label(job_id)).to_be_checked()
    legend.get_by_label(TRIALS[0]).uncheck()
    expect(loss).to_have_attribute("data-hidden", TRIALS[0])
    legend.get_by_label(TRIALS[0]).check()
    expect(loss).to_have_attribute("data-hidden", "")
    pages.shot(page, "console-compare")  # docs/console.md

    loss.scroll_into_view_if_needed()
    with page.expect_request(lambda r: "/ui/compare/series/loss?" in r.url and "from=" in r.url):
        _drag(page, 'figure.chart[data-series="loss"]', 0.30, 0.34)
    expect(loss.get_by_role("status")).to_contain_text("of a range")
    in_range = int(loss.get_attribute("data-in-range") or 0)
    assert 0 < in_range < 2 * STEPS and loss.get_attribute("data-points") == str(in_range), "a range at full resolution"
    loss.get_by_label("Log scale").check()
    loss.get_by_label("Axis").select_option("time")
    expect(loss).to_have_attribute("data-in-range", str(2 * STEPS))
    expect(loss.get_by_role("status")).to_contain_text("of the whole series")
    expect(loss.locator("canvas")).to_have_count(1)

    assert not _violations(page, axe_source), "axe: the compare page with its charts drawn"
    page.emulate_media(color_scheme="dark")
    assert not _violations(page, axe_source), "axe: the same, dark"
    page.get_by_role("link", name="Show all rows").click()
    expect(page.locator('tr[data-key="width"]')).to_have_count(1)
    assert _differing(page) == ["lr"]
    expect(page.locator('tr[data-key="signed"] td')).to_have_text(["yes", "yes"])
    assert errors == [], "no script error on the page"


def test_without_javascript_the_table_reads_and_a_job_is_added_by_its_field(console: Console, pages: Pages) -> None:
    page = pages.open(javascript=False, width=375, dark=True)
    log_in(page, console, path=f"/ui/compare?jobs={TRIALS[0]}")
    expect(page.get_by_role("main")).to_contain_text("Add at least one more")
    page.get_by_label("Add a job").fill(TRIALS[1])
    page.get_by_role("button", name="Add").click()
    page.wait_for_url(f"**/ui/compare?jobs={TRIALS[0]},{TRIALS[1]}")
    assert _differing(page) == ["lr"]
    expect(page.locator("#compare-charts")).to_contain_text("learnerkit job metrics JOB")
    # The page's own part (the navigation bar above it is base.html's): nothing wider than the screen.
    wide = page.evaluate("[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > 376)")
    assert wide == [], "no sideways scrolling at 375 px"


def test_another_tenants_job_reads_as_none_and_more_than_fifty_are_refused(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console, path=f"/ui/compare?jobs={TRIALS[0]},{console.other_job_id}")
    theirs = page.get_by_role("alert").inner_text()
    assert theirs == f"There is no job '{console.other_job_id}'."
    answer = page.goto(f"{console.url}/ui/compare?jobs={TRIALS[0]},job-nobody")
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("alert")).to_have_text(theirs.replace(console.other_job_id, "job-nobody"))
    expect(page.get_by_role("main")).not_to_contain_text("secret-of-b")
    many = ",".join([*TRIALS, *(f"job-{n}" for n in range(49))])
    answer = page.goto(f"{console.url}/ui/compare?jobs={many}")
    assert answer is not None and answer.status == 400
    expect(page.get_by_role("main")).to_contain_text("at most 50 jobs; the address names 51")


def test_the_lists_ticks_stay_through_a_live_update_of_its_rows(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console)
    page.get_by_label(f"Compare {TRIALS[0]}").check()
    page.locator("table.jobs tbody").evaluate("rows => { rows.dataset.drawn = 'first'; }")
    # A job the list does not show: live.js fetches the list again and swaps its rows.
    put_status(console, f"job-{uuid.uuid4().hex[:12]}", "team-a", JobStatus.QUEUED, "submitted elsewhere")
    expect(page.locator("table.jobs tbody[data-drawn]")).to_have_count(0)
    expect(page.get_by_label(f"Compare {TRIALS[0]}")).to_be_checked()
    expect(page.get_by_label(f"Compare {TRIALS[1]}")).not_to_be_checked()
    pages.shot(page, "jobs-ticked-1280")
    page.set_viewport_size({"width": 800, "height": 900})
    pages.shot(page, "jobs-ticked-800")
