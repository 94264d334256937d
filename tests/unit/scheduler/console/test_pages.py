"""The console's pages over the fake facade (FastAPI's TestClient): the list walked page by page over 10,000
jobs, the redirects and the 404 pages. The browser tests against a real scheduler are in
tests/integration/console."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade, view

JOBS = 10_000
PAGE_BYTES = 256 * 1024


@pytest.fixture
def fake() -> FakeFacade:
    facade = FakeFacade()
    for n in range(JOBS):
        facade.add(
            view(
                f"a-{n:05d}",
                "team-a",
                "HALTED" if n % 7 == 0 else "QUEUED",
                name=f"model-{n % 13}",
                submitted_at=f"2026-11-{1 + n // 1000:02d}T{n % 24:02d}:{n % 60:02d}:00+00:00",
            )
        )
    facade.add(view("b-1", "team-b"))
    return facade


@pytest.fixture
def browser(fake: FakeFacade, tenants: Tenants) -> Iterator[TestClient]:
    """A client logged in as team-a, as a browser would: the login form's CSRF token and cookie sent back."""
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    with TestClient(create_app(fake, tenants.path, console=settings)) as client:
        form = client.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        answer = client.post("/ui/login", data={"csrf": csrf.group(1), "token": tenants.a, "next": "/ui/logout"})
        assert answer.url.path == "/ui/jobs", "the log-out page is never where a log-in leads"
        yield client


def test_the_list_walks_ten_thousand_jobs_once_each_in_small_pages(browser: TestClient) -> None:
    seen: list[str] = []
    url = "/ui/jobs?limit=200&sort=name"
    sizes = []
    while url:
        page = browser.get(url)
        assert page.status_code == 200
        sizes.append(len(page.content))
        seen += re.findall(r'<td class="id"><a href="/ui/jobs/(a-\d+)">', page.text)
        following = re.search(r'<a href="([^"]+)" rel="next">', page.text)
        url = following.group(1).replace("&amp;", "&") if following else ""
    assert sorted(seen) == [f"a-{n:05d}" for n in range(JOBS)]
    assert len(sizes) == JOBS // 200 and max(sizes) < PAGE_BYTES
    assert f"{JOBS} jobs" in browser.get("/ui/jobs").text


def test_a_list_page_holds_the_jobs_the_apis_page_holds(browser: TestClient, tenants: Tenants) -> None:
    query = "sort=-name&status=HALTED&limit=50"
    html = browser.get(f"/ui/jobs?{query}").text
    api = browser.get(f"/v1/jobs?{query}", headers={"Authorization": f"Bearer {tenants.a}"})
    assert re.findall(r'<td class="id"><a href="/ui/jobs/([^"]+)">', html) == [job["job_id"] for job in api.json()]
    assert f"{api.headers['X-Total-Count']} jobs" in html


def test_filters_narrow_the_list_and_a_bad_one_is_named(browser: TestClient) -> None:
    page = browser.get("/ui/jobs?status=HALTED&q=model-3&limit=200")
    ids = re.findall(r'<td class="id"><a href="/ui/jobs/a-(\d+)">', page.text)
    assert ids and all(int(n) % 7 == 0 and int(n) % 13 == 3 for n in ids)
    bad = browser.get("/ui/jobs?sort=size")
    assert bad.status_code == 400 and "sort: one of -submitted, submitted, name" in bad.text


def test_unknown_pages_and_other_tenants_jobs_are_html_404s(browser: TestClient) -> None:
    for path in ("/ui/jobs/b-1", "/ui/jobs/zz-9", "/ui/nowhere"):
        page = browser.get(path)
        assert page.status_code == 404 and page.headers["content-type"].startswith("text/html"), path
    assert "There is no job &#39;b-1&#39;." in browser.get("/ui/jobs/b-1").text


def test_the_root_redirects_to_the_console(browser: TestClient) -> None:
    assert browser.get("/", follow_redirects=False).headers["location"] == "/ui/"
    assert browser.get("/ui/", follow_redirects=False).headers["location"] == "/ui/jobs"
    assert browser.get("/ui/jobs").headers["content-security-policy"].startswith("default-src 'none'")


def test_cookies_are_secure_when_served_over_tls(fake: FakeFacade, tenants: Tenants) -> None:
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)), secure=True)
    with TestClient(create_app(fake, tenants.path, console=settings), base_url="https://testserver") as client:
        form = client.get("/ui/login")
        assert "; secure" in form.headers["set-cookie"].lower()
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        answer = client.post("/ui/login", data={"csrf": csrf.group(1), "token": tenants.a}, follow_redirects=False)
        session = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("learnerkit_session="))
        assert {"httponly", "secure", "samesite=strict", "path=/", "max-age=28800"} <= {
            part.strip().lower() for part in session.split(";")
        }
