"""`GET /v1/sweeps` paged as `GET /v1/jobs` is: ``limit``, the ``next`` token, its headers, the same words for a
bad token or limit, and a page cut at its byte bound."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.facade import MAX_PAGE_BYTES, TrialView
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.console.test_sweeps_views import sweep
from tests.unit.scheduler.fakefacade import FakeFacade, view

SWEEPS = 7


@pytest.fixture
def client(fake: FakeFacade, tenants: Tenants) -> Iterator[TestClient]:
    base = sweep()
    for n in reversed(range(SWEEPS)):  # stored newest first: the list sorts them
        sweep_id = f"sweep-{n:08x}"
        fake.sweeps[sweep_id] = replace(base, sweep_id=sweep_id, submitted_at=f"2026-11-29T04:{n:02d}:00+00:00")
    fake.sweeps["sweep-ffffffff"] = replace(base, sweep_id="sweep-ffffffff", tenant="team-b")
    with TestClient(create_app(fake, tenants.path), headers={"Authorization": f"Bearer {tenants.a}"}) as test_client:
        yield test_client


def test_the_sweeps_are_paged_oldest_first_by_their_next_token(client: TestClient) -> None:
    seen: list[list[str]] = []
    address = "/v1/sweeps?limit=3"
    while address:
        page = client.get(address)
        assert page.status_code == 200, page.text
        assert page.headers["X-Total-Count"] == str(SWEEPS)
        seen.append([s["sweep_id"] for s in page.json()])
        token = page.headers.get("X-Next-Token")
        assert ("Link" in page.headers) == (token is not None)
        address = f"/v1/sweeps?limit=3&next={token}" if token else ""
    assert seen == [
        ["sweep-00000000", "sweep-00000001", "sweep-00000002"],
        ["sweep-00000003", "sweep-00000004", "sweep-00000005"],
        ["sweep-00000006"],
    ], "each of the tenant's sweeps once, oldest first; another tenant's never"
    whole = client.get("/v1/sweeps")
    assert [s["sweep_id"] for s in whole.json()] == [one for page in seen for one in page], "a client of old: page 1"
    assert "X-Next-Token" not in whole.headers


@pytest.mark.parametrize("query", ["next=not-a-token", "limit=0", "limit=abc", f"limit={10**5}"])
def test_a_bad_token_or_limit_has_the_job_lists_words(client: TestClient, query: str) -> None:
    sweeps, jobs = client.get(f"/v1/sweeps?{query}"), client.get(f"/v1/jobs?{query}")
    assert sweeps.status_code == jobs.status_code >= 400
    assert sweeps.json()["message"] == jobs.json()["message"], sweeps.text


def test_a_token_of_the_job_list_is_refused(client: TestClient, fake: FakeFacade) -> None:
    for n in range(3):
        fake.add(view(f"a-{n}", "team-a"))
    token = client.get("/v1/jobs?limit=1").headers["X-Next-Token"]
    refused = client.get(f"/v1/sweeps?next={token}")
    assert refused.status_code == 400
    assert refused.json()["message"] == f"next: {token[:40]!r} is not a next token this scheduler gave"


def test_a_page_is_cut_at_its_byte_bound_and_goes_on_from_its_last_sweep(client: TestClient, fake: FakeFacade) -> None:
    trials = tuple(
        TrialView(index=i, job_id=f"t-{i:05d}", state="done", rung=1, budget=2, results=(0.5,), reason="x" * 100)
        for i in range(600)
    )
    for sweep_id in list(fake.sweeps):
        fake.sweeps[sweep_id] = replace(fake.sweeps[sweep_id], trials=trials)
    first = client.get("/v1/sweeps?limit=50")
    assert len(first.content) <= MAX_PAGE_BYTES
    sent = [s["sweep_id"] for s in first.json()]
    assert 0 < len(sent) < SWEEPS, "cut short of the limit"
    rest = client.get(f"/v1/sweeps?limit=50&next={first.headers['X-Next-Token']}").json()
    assert rest[0]["sweep_id"] == f"sweep-{len(sent):08x}", "the next page starts after the last sweep sent"
