"""The console as a person uses it, in Debian's chromium against a real scheduler (conftest.py)."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from learnerkit.scheduler.api.auth import add_token, revoke
from tests.integration.console.conftest import FIRST_LOG, JOBS_A, RESULT, SECOND_LOG, Console, Pages, log_in

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]


def test_the_root_leads_to_the_login_and_a_token_to_the_tenants_jobs(console: Console, pages: Pages) -> None:
    page = pages.open()
    page.goto(console.url + "/")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=%2Fui%2Fjobs$"))
    expect(page.get_by_label("Tenant token")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(page.get_by_role("link", name="learnerkit")).to_be_focused()
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid", "focus is visible"
    page.keyboard.press("Tab")
    pages.shot(page, "login-1280")
    log_in(page, console, path="/")
    expect(page).to_have_url(console.url + "/ui/jobs")
    expect(page.get_by_role("status")).to_have_text(f"{JOBS_A + 1} jobs")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(JOBS_A + 1)
    expect(page.get_by_text("secret-of-b")).to_have_count(0)
    pages.shot(page, "jobs-1280")
    cookie = next(c for c in page.context.cookies() if c["name"] == "learnerkit_session")
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["secure"]) == (True, "Strict", False)
    assert cookie["expires"] > 0, "a session cookie that expires, not one for the browser's life"


def test_a_wrong_token_is_refused_and_the_page_says_so(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console, token=console.token[:-4] + "AAAA")
    expect(page.get_by_role("alert")).to_have_text("That token is unknown or revoked.")
    expect(page).to_have_url(re.compile(r"/ui/login"))
    assert not [c for c in page.context.cookies() if c["name"] == "learnerkit_session"]


def test_the_list_pages_filters_sorts_and_searches_on_the_server(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console, path="/ui/jobs?limit=25&sort=name")
    expect(page.locator("table.jobs tbody tr")).to_have_count(25)
    names = page.locator("table.jobs tbody tr td:nth-child(2)").all_inner_texts()
    assert names == sorted(names)
    page.get_by_role("link", name="Next page").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(JOBS_A + 1 - 25)
    expect(page.get_by_role("link", name="Next page")).to_have_count(0)
    page.get_by_role("link", name="Name ▲").click()
    expect(page.get_by_role("columnheader", name="Name ▼")).to_have_attribute("aria-sort", "descending")
    names = page.locator("table.jobs tbody tr td:nth-child(2)").all_inner_texts()
    assert names == sorted(names, reverse=True) and len(names) == 25
    page.get_by_label("Status").select_option("HALTED")
    page.get_by_label("Search").fill("RESNET")
    page.get_by_role("button", name="Show").click()
    rows = page.locator("table.jobs tbody tr")
    for row in rows.all():
        expect(row).to_contain_text("resnet-50")
        expect(row).to_contain_text("HALTED")
    expect(page.get_by_role("status")).to_have_text(f"{rows.count()} job" + ("" if rows.count() == 1 else "s"))
    page.goto(console.url + "/ui/jobs?since=yesterday")
    expect(page.get_by_role("alert")).to_contain_text("since: expected an ISO-8601 time")


def test_the_job_page_shows_why_the_timeline_the_log_and_the_files(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console)
    page.get_by_role("link", name=console.job_id).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("mnist-preempted HALTED")
    expect(page.locator(".reason-line")).to_have_text("Ended: halted by its user")
    timeline = page.locator(".timeline li").all_inner_texts()
    assert [line.split("\n")[0].split(" 20")[0] for line in timeline] == [
        "submitted",
        "attempt 1 started",
        "attempt 1 preempted",
        "attempt 2 started",
        "attempt 2 halted",
    ]
    assert "preempted by job job-urgent; 12 step(s) lost" in timeline[2]
    assert "resumed from attempt 1's checkpoint" in timeline[3]
    expect(page.locator("pre.log")).to_have_text(SECOND_LOG[0].decode())
    expect(page.locator("section", has=page.locator("#h-resources")).locator("dl")).to_have_text(
        "Learners1CPUs0.01Memory16Mb"
    )
    expect(page.locator("pre.manifest")).to_contain_text("password: (deleted)")
    expect(page.locator("pre.manifest")).not_to_contain_text("secret")
    pages.shot(page, "job-1280")
    pages.shot(page, "job-1280-top", full_page=False)
    page.get_by_role("navigation", name="Attempt").get_by_role("link", name="1").click()
    first = b"".join(FIRST_LOG).decode()
    tail = page.locator("pre.log").inner_text()
    assert first.endswith(tail) and tail.endswith("preempted: checkpoint at step 4000\n") and len(tail) < len(first)
    page.get_by_role("link", name="Earlier lines").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("log of attempt 1, learner 1")
    earlier = page.locator("pre.log").inner_text()
    assert first.endswith(earlier + tail) or earlier in first
    page.go_back()
    page.get_by_role("link", name="The log's start").click()
    expect(page.locator("pre.log")).to_contain_text("step 1 loss 0.998\nstep 2 loss 0.997\n")
    expect(page.get_by_role("link", name="Earlier")).to_have_count(0)
    with page.expect_download() as download:
        page.get_by_role("link", name="Download").click()
    assert download.value.path().read_bytes() == b"".join(FIRST_LOG)
    page.goto(f"{console.url}/ui/jobs/{console.job_id}")
    with page.expect_download() as stored:
        page.get_by_role("link", name="attempt-2/learner-1/results/scores.txt").click()
    assert stored.value.path().read_bytes() == RESULT


def test_another_tenants_job_and_an_unknown_one_are_the_same_404_page(console: Console, pages: Pages) -> None:
    page = pages.open()
    log_in(page, console)
    for job_id in (console.other_job_id, "job-000000000000"):
        response = page.goto(f"{console.url}/ui/jobs/{job_id}")
        assert response is not None and response.status == 404
        expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
        expect(page.locator("main .error")).to_have_text(f"There is no job '{job_id}'.")
    pages.shot(page, "not-found-1280")


def test_pages_read_without_javascript_at_375_px_in_the_dark(console: Console, pages: Pages) -> None:
    page = pages.open(width=375, javascript=False, dark=True)
    log_in(page, console)
    expect(page.locator("table.jobs tbody tr")).to_have_count(JOBS_A + 1)
    pages.shot(page, "jobs-375")
    page.goto(f"{console.url}/ui/jobs/{console.job_id}")
    expect(page.locator("pre.log")).to_have_text(SECOND_LOG[0].decode())
    pages.shot(page, "job-375")
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(console.url + "/ui/login")


def test_at_375_px_no_page_scrolls_sideways(console: Console, pages: Pages) -> None:
    page = pages.open(width=375)
    log_in(page, console)
    pages.shot(page, "jobs-375-top", full_page=False)
    for path in ("/ui/jobs", f"/ui/jobs/{console.job_id}", f"/ui/jobs/{console.job_id}/log?attempt=1&end=200000"):
        page.goto(console.url + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375, path


def _session(console: Console) -> tuple[requests.Session, str]:
    """A logged-in HTTP session and its CSRF token, read from the page as a browser would."""
    http = requests.Session()
    form = http.get(f"{console.url}/ui/login", timeout=30)
    login_csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert login_csrf is not None
    answer = http.post(
        f"{console.url}/ui/login",
        data={"csrf": login_csrf.group(1), "token": console.token, "next": ""},
        headers={"Origin": console.url},
        timeout=30,
    )
    csrf = re.search(r'name="csrf" value="([^"]+)"', answer.text)
    assert answer.status_code == 200 and csrf is not None, answer.text
    return http, csrf.group(1)


def test_a_change_without_the_csrf_token_is_refused(console: Console) -> None:
    http, csrf = _session(console)
    refused = http.post(f"{console.url}/ui/logout", data={}, headers={"Origin": console.url}, timeout=30)
    assert refused.status_code == 403 and "CSRF token is missing or wrong" in refused.text
    wrong = http.post(f"{console.url}/ui/logout", data={"csrf": csrf[:-1]}, timeout=30)
    assert wrong.status_code == 403
    assert http.get(f"{console.url}/ui/jobs", allow_redirects=False, timeout=30).status_code == 200, "still in"
    done = http.post(f"{console.url}/ui/logout", data={"csrf": csrf}, allow_redirects=False, timeout=30)
    assert done.status_code == 303
    assert http.get(f"{console.url}/ui/jobs", allow_redirects=False, timeout=30).status_code == 303


def test_a_foreign_host_or_origin_is_refused(console: Console) -> None:
    http, _ = _session(console)
    port = console.url.rsplit(":", 1)[1]
    for path in ("/ui/login", "/ui/jobs", f"/ui/jobs/{console.job_id}"):
        answer = http.get(f"{console.url}{path}", headers={"Host": f"attacker.example:{port}"}, timeout=30)
        assert answer.status_code == 403, path
        assert console.job_id not in answer.text
    assert http.get(f"{console.url}/ui/jobs", headers={"Host": f"localhost:{port}"}, timeout=30).status_code == 200
    cross = requests.post(
        f"{console.url}/ui/login",
        data={"csrf": "x", "token": console.token},
        headers={"Origin": "http://attacker.example"},
        timeout=30,
    )
    assert cross.status_code == 403


def test_a_revoked_token_ends_its_sessions_and_the_login_keeps_the_page(console: Console, pages: Pages) -> None:
    token = add_token(console.tokens, "team-a")
    page = pages.open()
    log_in(page, console, token=token)
    wanted = f"/ui/jobs/{console.job_id}?attempt=1"
    page.goto(console.url + wanted)
    expect(page.locator("pre.log")).to_be_visible()
    assert revoke(console.tokens, token_id=token.split("_")[1]) == [token.split("_")[1]]
    page.reload()
    expect(page).to_have_url(
        re.compile(r"/ui/login\?next=%2Fui%2Fjobs%2F" + console.job_id + r"%3Fattempt%3D1&ended=1$")
    )
    expect(page.get_by_role("status")).to_have_text("Your session has ended; log in again.")
    log_in(page, console, token=token, path=page.url.removeprefix(console.url))
    expect(page.get_by_role("alert")).to_have_text("That token is unknown or revoked.")
    page.get_by_label("Tenant token").fill(console.token)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(console.url + wanted)


def test_the_guard_stops_and_reports_a_request_leaving_127_0_0_1(pages: Pages) -> None:
    page = pages.open()
    with pytest.raises(PlaywrightError, match="net::ERR_FAILED"):
        page.goto("http://198.51.100.7/asset.css")  # TEST-NET-2: nothing there, and never reached
    assert pages.left == ["http://198.51.100.7/asset.css"]
    pages.left.clear()  # reported: this test's own request, not the console's
