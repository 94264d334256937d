"""The live console and `/v1/events` against a real scheduler over the real etcd (conftest.py): a change written
to etcd as the scheduler writes it shows in an open page without a reload; a stream resumes by Last-Event-ID;
another tenant's events never arrive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from controller_sidecar import keys
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from tests.integration.console.conftest import Console, Pages, log_in
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]


def put_status(console: Console, job_id: str, tenant: str, status: JobStatus, reason: str) -> None:
    """The job's status as `JobStore.save` writes it (the scheduler's own record)."""
    state = JobState(job_id, tenant, "mnist", 1_800_000_000.0).evolve(status=status, stage=Stage.QUEUED, reason=reason)
    console.put(keys.job_status_key(job_id, console.root), json.dumps(state.to_raw(), sort_keys=True))


def auth(console: Console) -> dict[str, str]:
    return {"Authorization": f"Bearer {console.token}"}


def sse(console: Console, token: str, last_event_id: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    response = requests.get(f"{console.url}/v1/events", headers=headers, stream=True, timeout=(5, 30))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return response


def events(response: requests.Response) -> Iterator[dict[str, str]]:
    """Each event's fields (id, event, data) as they arrive; comments skipped."""
    fields: dict[str, str] = {}
    for line in response.iter_lines(decode_unicode=True):
        if line == "":
            if "event" in fields:
                yield fields
            fields = {}
        elif not line.startswith(":") and ":" in line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def until(stream: Iterator[dict[str, str]], wanted: str, deadline_s: float = 20) -> list[dict[str, str]]:
    """Events up to and including the first whose data holds ``wanted``."""
    seen, end = [], time.monotonic() + deadline_s
    for event in stream:
        seen.append(event)
        if wanted in event["data"]:
            return seen
        assert time.monotonic() < end, f"no event with {wanted!r} within {deadline_s} s: {seen}"
    raise AssertionError(f"the stream ended before an event with {wanted!r}: {seen}")


def test_a_change_in_etcd_shows_in_the_open_list_and_job_page_without_a_reload(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console)
    row = page.locator(f'tr[data-job="{console.job_id}"]')
    expect(row.locator(".status")).to_have_text("HALTED")
    page.evaluate("window.notReloaded = true")
    scrolled = page.evaluate("window.scrollTo(0, 300), scrollY")
    assert scrolled > 0
    put_status(console, console.job_id, "team-a", JobStatus.PROCESSING, "live from etcd")
    expect(row.locator(".status")).to_have_text("PROCESSING")
    expect(row.locator(".status")).to_have_class("status s-processing")
    expect(row.locator("[data-live=reason]")).to_have_text("live from etcd")
    assert page.evaluate("window.notReloaded === true && scrollY") == scrolled, "same page, same scroll"
    pages.shot(page, "live-list")

    job = pages.open()
    log_in(job, console, path=f"/ui/jobs/{console.job_id}")
    job.evaluate("window.notReloaded = true")
    put_status(console, console.job_id, "team-a", JobStatus.FAILED, "out of memory")
    expect(job.locator("h1 .status")).to_have_text("FAILED")
    expect(job.locator("p[data-live=reason]")).to_have_text("Ended: out of memory")
    assert job.evaluate("window.notReloaded === true")
    pages.shot(job, "live-job")


def test_a_stream_resumes_after_its_last_event_id_without_missing_one(console: Console) -> None:
    first = sse(console, console.token)
    put_status(console, console.job_id, "team-a", JobStatus.PROCESSING, "resume-1")
    seen = until(events(first), "resume-1")
    last_id = seen[-1]["id"]
    first.close()
    for n in (2, 3, 4):  # while no stream is open
        put_status(console, console.job_id, "team-a", JobStatus.PROCESSING, f"resume-{n}")
    again = sse(console, console.token, last_event_id=last_id)
    replayed = until(events(again), "resume-4")
    again.close()
    reasons = [json.loads(e["data"]).get("reason") for e in replayed if e["event"] == "job"]
    assert reasons == ["resume-2", "resume-3", "resume-4"], "each missed event once, in order, none seen before"
    assert all(e["id"] > last_id for e in replayed)


def test_a_position_no_longer_available_starts_with_a_snapshot(console: Console) -> None:
    stream = sse(console, console.token, last_event_id="1.0")
    first = next(events(stream))
    stream.close()
    assert first["event"] == "snapshot", "a position from before this scheduler started: read the state again"


def test_another_tenants_events_are_never_delivered(console: Console, pages: Pages) -> None:
    b_stream = sse(console, console.other_token)
    put_status(console, console.job_id, "team-a", JobStatus.PROCESSING, "secret-of-a")
    put_status(console, console.other_job_id, "team-b", JobStatus.QUEUED, "b-marker")
    seen = until(events(b_stream), "b-marker")
    b_stream.close()
    assert {json.loads(e["data"])["job_id"] for e in seen if e["event"] != "snapshot"} == {console.other_job_id}
    assert not any("secret-of-a" in e["data"] for e in seen)

    page = pages.open()
    log_in(page, console, token=console.other_token)
    page.evaluate("window.notReloaded = true")
    put_status(console, console.job_id, "team-a", JobStatus.COMPLETED, "secret-of-a-again")
    put_status(console, console.other_job_id, "team-b", JobStatus.PROCESSING, "b-live")
    expect(page.locator(f'tr[data-job="{console.other_job_id}"] [data-live=reason]')).to_have_text("b-live")
    expect(page.get_by_text("secret-of-a")).to_have_count(0)


def test_the_stream_needs_a_token_or_a_session(console: Console) -> None:
    assert requests.get(f"{console.url}/v1/events", timeout=10).status_code == 401
    answer = requests.get(f"{console.url}/ui/events", allow_redirects=False, timeout=10)
    assert answer.status_code == 303 and "/ui/login" in answer.headers["location"]


def test_job_status_follow_prints_each_event_of_the_job_as_json(console: Console, tmp_path: Path) -> None:
    queued = next(  # a job the scheduler holds QUEUED: --follow keeps following it
        e["job_id"]
        for e in requests.get(f"{console.url}/v1/jobs", headers=auth(console), timeout=10).json()
        if e["status"] == "QUEUED"
    )
    env = os.environ | {"LEARNERKIT_SCHEDULER_URL": console.url, "LEARNERKIT_TOKEN": console.token}
    out = tmp_path / "out.jsonl"
    with out.open("wb") as sink:
        follow = subprocess.Popen(
            [sys.executable, "-m", "learnerkit", "job", "status", queued, "--follow", "--output", "json"],
            stdout=sink,
            env=env,
        )
        try:
            wait_until(lambda: out.read_bytes().count(b"\n") >= 1, timeout=30, message="the job's view")

            def followed() -> bool:  # written again until the CLI's stream, opened after its first view, has it
                put_status(console, queued, "team-a", JobStatus.QUEUED, "follow-me")
                return b"follow-me" in out.read_bytes()

            wait_until(followed, timeout=30, interval=0.5, message=lambda: out.read_text())
        finally:
            follow.terminate()
            follow.wait(30)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["job_id"] == queued and "event" not in lines[0], "first the job's view"
    followed = [line for line in lines if line.get("event") == "job"]
    assert followed and all(e["job_id"] == queued and e["id"] for e in followed)
    assert followed[0]["reason"] == "follow-me"
