"""``/v1/jobs/{id}/series``: a learner's metric series, a range of it thinned on the server, per tenant."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.series.window import MAX_POINTS
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade, view

STEPS = 6_000


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def history(steps: range) -> bytes:
    return b"".join(
        json.dumps({"step": s, "time": 1.8e9 + s, "values": {"train/loss": 1 / (s + 1), "acc": s % 10}}).encode()
        + b"\n"
        for s in steps
    )


@pytest.fixture
def client(fake: FakeFacade, tenants: Tenants) -> Iterator[TestClient]:
    fake.add(view("a-1", "team-a", status="COMPLETED"), metrics=history(range(STEPS)))
    fake.add(view("b-1", "team-b", status="COMPLETED"), metrics=history(range(10)))
    with TestClient(create_app(fake, tenants.path)) as test_client:
        yield test_client


def test_the_index_names_each_series_and_its_length(client: TestClient, tenants: Tenants) -> None:
    answer = client.get("/v1/jobs/a-1/series", headers=bearer(tenants.a))
    assert answer.status_code == 200
    assert answer.json() == {
        "job_id": "a-1",
        "learner": 1,
        "series": [
            {"name": "acc", "steps": STEPS, "times": STEPS},
            {"name": "train/loss", "steps": STEPS, "times": STEPS},
        ],
    }


def test_a_long_series_comes_thinned_and_a_zoomed_range_whole(client: TestClient, tenants: Tenants) -> None:
    whole = client.get("/v1/jobs/a-1/series/train/loss", params={"points": 1000}, headers=bearer(tenants.a)).json()
    assert (whole["name"], whole["axis"], whole["total"], whole["in_range"]) == ("train/loss", "step", STEPS, STEPS)
    assert len(whole["x"]) == len(whole["y"]) <= 1000
    assert (whole["x"][0], whole["x"][-1], whole["first"], whole["last"]) == (0, STEPS - 1, 0, STEPS - 1)
    assert max(whole["y"]) == 1.0, "the series' maximum is kept"
    zoomed = client.get(
        "/v1/jobs/a-1/series/train/loss", params={"from": 100, "to": 399, "points": 1000}, headers=bearer(tenants.a)
    ).json()
    assert zoomed["in_range"] == 300 and zoomed["x"] == list(range(100, 400))
    assert zoomed["y"] == [1 / (s + 1) for s in range(100, 400)]
    by_time = client.get(
        "/v1/jobs/a-1/series/acc",
        params={"axis": "time", "from": 1.8e9 + 5, "to": 1.8e9 + 7},
        headers=bearer(tenants.a),
    ).json()
    assert (by_time["x"], by_time["y"]) == ([1.8e9 + 5, 1.8e9 + 6, 1.8e9 + 7], [5, 6, 7])


def test_a_history_that_grew_is_read_again(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    assert client.get("/v1/jobs/b-1/series/acc", headers=bearer(tenants.b)).json()["total"] == 10
    fake.jobs["b-1"].metrics += history(range(10, 25))
    assert client.get("/v1/jobs/b-1/series/acc", headers=bearer(tenants.b)).json()["total"] == 25


def test_another_tenants_job_is_not_found_in_the_same_words_as_none(client: TestClient, tenants: Tenants) -> None:
    for path in ("/v1/jobs/a-1/series", "/v1/jobs/a-1/series/acc"):
        foreign = client.get(path, headers=bearer(tenants.b))
        missing = client.get(path.replace("a-1", "zz-9"), headers=bearer(tenants.b))
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == {"error": "not_found", "message": "no job 'a-1'"}
        assert "team-a" not in foreign.text


def test_an_unknown_metric_is_not_found_naming_those_there_are(client: TestClient, tenants: Tenants) -> None:
    answer = client.get("/v1/jobs/a-1/series/val/loss", headers=bearer(tenants.a))
    assert answer.status_code == 404
    assert answer.json()["message"] == "job 'a-1' learner 1 has no metric 'val/loss' (it has: acc, train/loss)"


@pytest.mark.parametrize(
    ("params", "status", "words"),
    [
        ({"from": 10, "to": 5}, 400, "from: must not be after to; got from=10, to=5"),
        ({"from": "ten"}, 422, "query.from: Input should be a valid number"),
        ({"points": MAX_POINTS + 1}, 422, f"query.points: Input should be less than or equal to {MAX_POINTS}"),
        ({"points": 2}, 422, "query.points: Input should be greater than or equal to 10"),
        ({"axis": "epoch"}, 422, "query.axis: Input should be 'step' or 'time'"),
        ({"learner": 0}, 422, "query.learner: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_range_is_refused_naming_the_parameter(
    client: TestClient, tenants: Tenants, params: dict[str, object], status: int, words: str
) -> None:
    answer = client.get("/v1/jobs/a-1/series/acc", params=params, headers=bearer(tenants.a))
    assert answer.status_code == status
    assert answer.json()["message"].startswith(words)


def test_the_series_need_a_token(client: TestClient) -> None:
    for path in ("/v1/jobs/a-1/series", "/v1/jobs/a-1/series/acc"):
        assert client.get(path).status_code == 401
