"""The REST API over a fake facade: bearer auth, tenant isolation, manifest problems, the OpenAPI document."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter

from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.api.app import MAX_TAIL_LINES, create_app
from learnerkit.scheduler.config.settings import LimitSettings
from learnerkit.scheduler.errors import ManifestTooLargeError, StoreUnavailableError
from learnerkit.scheduler.facade import DEFAULT_PAGE_JOBS, MAX_PAGE_BYTES, MAX_PAGE_JOBS
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import MANIFEST, FakeFacade, view

YAML = {"Content-Type": "application/yaml"}
JOB_ENDPOINTS = [
    ("GET", "/v1/jobs/{id}"),
    ("POST", "/v1/jobs/{id}/halt"),
    ("POST", "/v1/jobs/{id}/resume"),
    ("POST", "/v1/jobs/{id}/cancel"),
    ("DELETE", "/v1/jobs/{id}"),
    ("GET", "/v1/jobs/{id}/logs"),
    ("GET", "/v1/jobs/{id}/metrics"),
    ("GET", "/v1/jobs/{id}/series"),
    ("GET", "/v1/jobs/{id}/series/loss"),
    ("GET", "/v1/jobs/{id}/files"),
    ("GET", "/v1/jobs/{id}/files/attempt-1/learner-1/results/out.txt"),
    ("GET", "/v1/jobs/{id}/manifest"),
]
ALL_V1 = [("POST", "/v1/jobs"), ("GET", "/v1/jobs"), *JOB_ENDPOINTS]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def client(fake: FakeFacade, tenants: Tenants) -> Iterator[TestClient]:
    with TestClient(create_app(fake, tenants.path)) as test_client:
        yield test_client


def test_healthz_needs_no_token(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize(("method", "path"), ALL_V1)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Bearer lkt_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    ],
    ids=["none", "basic", "garbage", "unknown"],
)
def test_every_v1_endpoint_refuses_a_missing_or_bad_token(
    client: TestClient, fake: FakeFacade, method: str, path: str, headers: dict[str, str]
) -> None:
    response = client.request(method, path.format(id="job-1"), headers=headers | YAML, content=MANIFEST)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert fake.calls == [], "the facade is never reached without a tenant"


def test_a_flood_of_wrong_secrets_is_refused_cheaply_and_a_verified_tenant_stays_fast(
    client: TestClient, tenants: Tenants
) -> None:
    assert client.get("/v1/jobs", headers=bearer(tenants.a)).status_code == 200
    forged = tenants.a[:17] + ("A" if tenants.a[17] != "A" else "B") + tenants.a[18:]
    statuses = [client.get("/v1/jobs", headers=bearer(forged)).status_code for _ in range(40)]
    assert statuses == [401] * 5 + [429] * 35
    started = time.perf_counter()
    assert client.get("/v1/jobs", headers=bearer(tenants.a)).status_code == 200
    assert time.perf_counter() - started < 0.5


def test_submit_yaml_returns_201_with_the_job_of_the_token_tenant(client: TestClient, tenants: Tenants) -> None:
    response = client.post("/v1/jobs", content=MANIFEST.format(gpus=1), headers=bearer(tenants.a) | YAML)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["tenant"] == "team-a"
    assert job["status"] == "QUEUED"
    assert job["reason"].startswith("waiting for 2 GPU")
    assert [learner["learner_id"] for learner in job["learners"]] == [1, 2]


def test_submit_json_body(client: TestClient, tenants: Tenants) -> None:
    body = {"manifest": MANIFEST.format(gpus=2), "source": "mine.yml"}
    response = client.post("/v1/jobs", json=body, headers=bearer(tenants.b))
    assert response.status_code == 201, response.text
    assert response.json()["tenant"] == "team-b"


def test_manifest_problems_come_back_with_file_line_and_field(client: TestClient, tenants: Tenants) -> None:
    text = MANIFEST.format(gpus=-1).replace("memory: 1Gb", "memory: lots").replace("cpus: 1", "cpus: 1\ncolour: red")
    body = {"manifest": text, "source": "bad.yml"}
    response = client.post("/v1/jobs", json=body, headers=bearer(tenants.a))
    assert response.status_code == 422
    error = response.json()
    assert error["error"] == "invalid_manifest"
    problems = {p["field"]: p for p in error["problems"]}
    assert {"gpus", "memory", "colour"} <= set(problems)
    assert problems["gpus"] == problems["gpus"] | {"file": "bad.yml", "line": 4}
    assert problems["colour"]["line"] == 3
    assert problems["memory"]["line"] == 6
    assert all(p["message"] for p in error["problems"])


def test_a_yaml_syntax_error_is_a_manifest_problem(client: TestClient, tenants: Tenants) -> None:
    response = client.post("/v1/jobs", content="name: [unclosed\n", headers=bearer(tenants.a) | YAML)
    assert response.status_code == 422
    assert response.json()["problems"][0]["file"] == "manifest.yml"


@pytest.mark.parametrize(
    ("content", "content_type", "status", "code"),
    [
        (b"name: x", "application/xml", 415, "unsupported_media_type"),
        (b"{not json", "application/json", 400, "bad_request"),
        (b'{"text": "name: x"}', "application/json", 400, "bad_request"),
        (b"name: \xff\xfe", "application/yaml", 400, "bad_request"),
        (b"#" * 800_000, "application/yaml", 413, "too_large"),
        (b"#" * (256 * 1024 + 1), "text/plain", 413, "too_large"),
        (json.dumps({"manifest": "#" * 800_000}).encode(), "application/json", 413, "too_large"),
    ],
    ids=["media-type", "json-syntax", "json-shape", "not-utf8", "too-large", "over-the-default", "too-large-json"],
)
def test_bodies_that_are_no_manifest(
    client: TestClient, tenants: Tenants, fake: FakeFacade, content: bytes, content_type: str, status: int, code: str
) -> None:
    response = client.post("/v1/jobs", content=content, headers=bearer(tenants.a) | {"Content-Type": content_type})
    assert response.status_code == status, response.text
    assert response.json()["error"] == code
    assert fake.jobs == {}


def test_a_tenant_over_its_submit_rate_gets_429_and_others_go_on(fake: FakeFacade, tenants: Tenants) -> None:
    with TestClient(create_app(fake, tenants.path, limits=LimitSettings(submits_per_minute=2))) as client:
        statuses = [
            client.post("/v1/jobs", content=MANIFEST.format(gpus=1), headers=bearer(tenants.a) | YAML).status_code
            for _ in range(3)
        ]
        refused = client.post("/v1/jobs", content=MANIFEST.format(gpus=1), headers=bearer(tenants.a) | YAML)
        other = client.post("/v1/jobs", content=MANIFEST.format(gpus=1), headers=bearer(tenants.b) | YAML)
    assert statuses == [201, 201, 429]
    assert refused.json()["error"] == "too_many_requests" and refused.headers["Retry-After"] == "30"
    assert other.status_code == 201


@pytest.mark.parametrize(
    ("error", "status", "code", "retry_after"),
    [
        (StoreUnavailableError("etcd did not answer"), 503, "unavailable", "5"),
        (ManifestTooLargeError("the manifest has 300000 bytes"), 413, "too_large", None),
    ],
)
def test_the_schedulers_own_refusals_keep_their_status(
    client: TestClient,
    tenants: Tenants,
    fake: FakeFacade,
    error: Exception,
    status: int,
    code: str,
    retry_after: str | None,
) -> None:
    fake.submit_error = error
    response = client.post("/v1/jobs", content=MANIFEST.format(gpus=1), headers=bearer(tenants.a) | YAML)
    assert (response.status_code, response.json()["error"]) == (status, code)
    assert response.headers.get("Retry-After") == retry_after


def test_list_shows_only_the_tenants_jobs(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a"))
    fake.add(view("b-1", "team-b"))
    response = client.get("/v1/jobs", headers=bearer(tenants.a))
    assert response.status_code == 200
    assert [job["job_id"] for job in response.json()] == ["a-1"]


def test_get_shows_reason_learners_and_metrics(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="QUEUED", reason="over quota"))
    job = client.get("/v1/jobs/a-1", headers=bearer(tenants.a)).json()
    assert job["reason"] == "over quota"
    assert job["learners"][0] | {"metrics": None} == {
        "learner_id": 1,
        "status": "QUEUED",
        "message": "",
        "exit_code": None,
        "metrics": None,
        "alive": True,
    }
    assert job["learners"][0]["metrics"] == {"loss": 0.25, "step": 100.0}


@pytest.mark.parametrize(("method", "path"), JOB_ENDPOINTS)
def test_another_tenants_job_is_not_found_on_every_verb(
    client: TestClient, tenants: Tenants, fake: FakeFacade, method: str, path: str
) -> None:
    fake.add(
        view("a-1", "team-a"),
        log=b"secret output",
        metrics=b'{"step": 1, "time": 1.0, "values": {"loss": 0.5}}\n',
        files={"attempt-1/learner-1/results/out.txt": b"secret result"},
    )
    response = client.request(method, path.format(id="a-1"), headers=bearer(tenants.b))
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "message": "no job 'a-1'"}
    unknown = client.request(method, path.format(id="zz-9"), headers=bearer(tenants.b))
    assert unknown.status_code == 404
    assert unknown.json()["message"] == "no job 'zz-9'", "unknown and foreign jobs read alike"
    assert fake.jobs["a-1"].view.status == "PROCESSING"


def test_the_manifest_reads_back_without_the_stores_credentials(client: TestClient, tenants: Tenants) -> None:
    job = client.post("/v1/jobs", content=MANIFEST.format(gpus=1), headers=bearer(tenants.a) | YAML).json()
    response = client.get(f"/v1/jobs/{job['job_id']}/manifest", headers=bearer(tenants.a))
    assert response.status_code == 200 and response.headers["content-type"] == "application/yaml"
    assert "user_name: (deleted)\n    password: (deleted)" in response.text
    assert "secret" not in response.text and "command: python train.py" in response.text


def test_halt_resume_cancel(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a"))
    headers = bearer(tenants.a)
    assert client.post("/v1/jobs/a-1/halt", headers=headers).json()["status"] == "HALTED"
    assert client.post("/v1/jobs/a-1/resume", headers=headers).json()["status"] == "QUEUED"
    assert client.post("/v1/jobs/a-1/cancel", headers=headers).json()["status"] == "CANCELLED"
    response = client.post("/v1/jobs/a-1/halt", headers=headers)
    assert response.status_code == 409
    assert response.json() == {"error": "conflict", "message": "job a-1 is CANCELLED: cannot make it HALTED"}


def test_an_ended_job_is_deleted_and_a_running_one_is_not(
    client: TestClient, tenants: Tenants, fake: FakeFacade
) -> None:
    fake.add(view("a-1", "team-a"))
    headers = bearer(tenants.a)
    refused = client.delete("/v1/jobs/a-1", headers=headers)
    assert refused.status_code == 409
    assert refused.json()["message"] == "job a-1 is PROCESSING: cancel it before deleting it"
    assert client.post("/v1/jobs/a-1/cancel", headers=headers).json()["status"] == "CANCELLED"
    deleted = client.delete("/v1/jobs/a-1", headers=headers)
    assert (deleted.status_code, deleted.json()["status"]) == (200, "CANCELLED")
    assert client.get("/v1/jobs/a-1", headers=headers).status_code == 404


def test_logs_are_bytes_with_the_next_offset(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"), log=b"epoch 1\nepoch 2\n")
    response = client.get("/v1/jobs/a-1/logs", params={"offset": 8, "learner": 1}, headers=bearer(tenants.a))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.content == b"epoch 2\n"
    assert response.headers["X-Next-Offset"] == "16"
    assert response.headers["X-Finished"] == "true"


@pytest.mark.parametrize("params", [{"learner": 0}, {"offset": -1}, {"learner": "one"}])
def test_bad_log_parameters_have_the_error_shape(
    client: TestClient, tenants: Tenants, fake: FakeFacade, params: dict[str, object]
) -> None:
    fake.add(view("a-1", "team-a"))
    response = client.get("/v1/jobs/a-1/logs", params=params, headers=bearer(tenants.a))
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "bad_request"
    assert next(iter(params)) in body["message"]


def test_metrics_are_the_stored_history_as_json_lines(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    history = b'{"step": 1, "time": 1.5, "values": {"loss": 0.5}}\n{"step": 2, "time": 2.5, "values": {"loss": 0.25}}\n'
    fake.add(view("a-1", "team-a", status="COMPLETED"), metrics=history)
    response = client.get("/v1/jobs/a-1/metrics", params={"learner": 1}, headers=bearer(tenants.a))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.content == history
    assert client.get("/v1/jobs/a-1/metrics", params={"learner": 2}, headers=bearer(tenants.a)).content == b""


def test_files_are_listed_by_kind_and_served_whole(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    files = {
        "attempt-1/learner-1/results/out.txt": b"result bytes",
        "attempt-1/learner-1/logs/metrics.jsonl": b"{}\n",
        "attempt-1/learner-2/checkpoints/ckpt-10/state.pt": b"x" * 9,
    }
    fake.add(view("a-1", "team-a", status="COMPLETED"), files=files)
    headers = bearer(tenants.a)
    listed = client.get("/v1/jobs/a-1/files", params={"what": "results"}, headers=headers).json()
    etag = hashlib.md5(b"result bytes").hexdigest()
    assert listed == [{"path": "attempt-1/learner-1/results/out.txt", "size": 12, "kind": "results", "etag": etag}]
    every = client.get("/v1/jobs/a-1/files", headers=headers).json()
    assert sorted(item["path"] for item in every) == sorted(files)
    served = client.get("/v1/jobs/a-1/files/attempt-1/learner-1/results/out.txt", headers=headers)
    assert served.status_code == 200
    assert (served.content, served.headers["content-length"]) == (b"result bytes", "12")
    missing = client.get("/v1/jobs/a-1/files/attempt-1/learner-1/results/nope", headers=headers)
    assert missing.status_code == 404
    assert missing.json()["message"] == "job a-1 stored no file 'attempt-1/learner-1/results/nope'"
    bad = client.get("/v1/jobs/a-1/files", params={"what": "everything"}, headers=headers)
    assert (bad.status_code, bad.json()["error"]) == (422, "bad_request")


def test_evaluation_data_a_round_lists_is_served_for_verify(
    client: TestClient, tenants: Tenants, fake: FakeFacade
) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"))
    fake.jobs["a-1"].evaluation_data["s3://data/eval/digits.csv"] = b"x,y\n1,0\n"
    headers = bearer(tenants.a)
    served = client.get("/v1/jobs/a-1/evaluation-data", params={"uri": "s3://data/eval/digits.csv"}, headers=headers)
    assert (served.status_code, served.content, served.headers["content-length"]) == (200, b"x,y\n1,0\n", "8")
    other = client.get("/v1/jobs/a-1/evaluation-data", params={"uri": "s3://data/secret.csv"}, headers=headers)
    assert other.status_code == 404
    assert other.json()["message"] == "job a-1: no evaluation round statement of it lists 's3://data/secret.csv'"
    foreign = client.get(
        "/v1/jobs/a-1/evaluation-data", params={"uri": "s3://data/eval/digits.csv"}, headers=bearer(tenants.b)
    )
    assert foreign.status_code == 404


def test_unknown_routes_have_the_error_shape(client: TestClient) -> None:
    response = client.get("/v2/jobs")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "message": "Not Found"}


def test_openapi_lists_every_endpoint(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operations = {(method.upper(), path) for path, item in spec["paths"].items() for method in item}
    assert operations == {
        ("POST", "/v1/jobs"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/jobs/{job_id}"),
        ("POST", "/v1/jobs/{job_id}/halt"),
        ("POST", "/v1/jobs/{job_id}/resume"),
        ("POST", "/v1/jobs/{job_id}/cancel"),
        ("POST", "/v1/jobs/{job_id}/evaluations"),
        ("GET", "/v1/jobs/{job_id}/evaluations"),
        ("DELETE", "/v1/jobs/{job_id}"),
        ("GET", "/v1/jobs/{job_id}/logs"),
        ("GET", "/v1/jobs/{job_id}/metrics"),
        ("GET", "/v1/jobs/{job_id}/series"),
        ("GET", "/v1/jobs/{job_id}/series/{name}"),
        ("GET", "/v1/jobs/{job_id}/files"),
        ("GET", "/v1/jobs/{job_id}/files/{path}"),
        ("GET", "/v1/jobs/{job_id}/manifest"),
        ("GET", "/v1/jobs/{job_id}/evaluation-data"),
        ("POST", "/v1/sweeps"),
        ("GET", "/v1/sweeps"),
        ("GET", "/v1/sweeps/{sweep_id}"),
        ("POST", "/v1/sweeps/{sweep_id}/halt"),
        ("POST", "/v1/sweeps/{sweep_id}/resume"),
        ("POST", "/v1/sweeps/{sweep_id}/cancel"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/{name}/versions/{reference}"),
        ("GET", "/v1/models/{name}/history"),
        ("GET", "/v1/models/{name}/verify/{reference}"),
        ("POST", "/v1/models/{name}/versions"),
        ("POST", "/v1/models/{name}/aliases/{alias}"),
        ("GET", "/healthz"),
    }
    assert spec["components"]["securitySchemes"]["HTTPBearer"] == spec["components"]["securitySchemes"][
        "HTTPBearer"
    ] | {"type": "http", "scheme": "bearer"}
    submit = spec["paths"]["/v1/jobs"]["post"]
    assert set(submit["requestBody"]["content"]) == {"application/yaml", "application/json", "multipart/form-data"}
    assert {"201", "401", "422"} <= set(submit["responses"])
    evaluate = spec["paths"]["/v1/jobs/{job_id}/evaluations"]["post"]
    assert set(evaluate["requestBody"]["content"]) == {"application/yaml", "application/json"}
    assert {"404", "409", "422"} <= set(evaluate["responses"])
    assert spec["paths"]["/v1/jobs/{job_id}"]["get"]["security"] == [{"HTTPBearer": []}]
    assert spec["paths"]["/v1/sweeps/{sweep_id}"]["get"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in spec["paths"]["/healthz"]["get"]


def test_metrics_come_from_the_registry_passed_in(fake: FakeFacade, tenants: Tenants) -> None:
    registry = CollectorRegistry()
    Counter("learnerkit_jobs_submitted", "jobs submitted", registry=registry).inc(3)
    with TestClient(create_app(fake, tenants.path, registry=registry)) as client:
        response = client.get("/metrics")
        assert "/metrics" in client.get("/openapi.json").json()["paths"]
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "learnerkit_jobs_submitted_total 3.0" in response.text


def test_no_metrics_route_without_a_registry(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 404


def test_the_services_lifespan_spans_the_server(fake: FakeFacade, tenants: Tenants) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        events.append("start")
        yield
        events.append("stop")

    with TestClient(create_app(fake, tenants.path, lifespan=lifespan)) as client:
        assert client.get("/healthz").status_code == 200
        assert events == ["start"]
    assert events == ["start", "stop"]


def test_a_tail_of_more_lines_than_the_limit_is_a_bad_request(client: TestClient, tenants: Tenants) -> None:
    auth = {"Authorization": f"Bearer {tenants.a}"}
    answer = client.get(f"/v1/jobs/job-1/logs?tail={MAX_TAIL_LINES + 1}", headers=auth)
    assert answer.status_code == 422 and answer.json()["error"] == "bad_request", answer.text
    assert "tail" in answer.json()["message"]


def test_an_internal_failure_names_no_internal_address(
    client: TestClient, tenants: Tenants, fake: FakeFacade, caplog: pytest.LogCaptureFixture
) -> None:
    fake.submit_error = LearnerkitError("etcd: HTTPConnection(host='127.0.0.1', port=2379): connection refused")
    answer = client.post(
        "/v1/jobs", content=b"name: x", headers={"Authorization": f"Bearer {tenants.a}", "Content-Type": "text/yaml"}
    )
    assert answer.status_code == 500 and answer.json()["error"] == "internal", answer.text
    assert "127.0.0.1" not in answer.text and "HTTPConnection" not in answer.text
    assert "the scheduler's log" in answer.json()["message"]
    assert any("127.0.0.1" in r.getMessage() for r in caplog.records), "the detail is in the log"


def test_list_pages_with_a_next_token_and_a_link_keeping_the_array_body(
    client: TestClient, tenants: Tenants, fake: FakeFacade
) -> None:
    for n in range(7):
        fake.add(view(f"a-{n}", "team-a", submitted_at=f"2026-11-22T12:00:0{n}+00:00"))
    fake.add(view("b-1", "team-b"))
    seen: list[str] = []
    params: dict[str, str] = {"limit": "3", "sort": "-submitted"}
    while True:
        response = client.get("/v1/jobs", params=params, headers=bearer(tenants.a))
        assert response.status_code == 200
        assert isinstance(response.json(), list)
        assert response.headers["X-Total-Count"] == "7"
        seen += [job["job_id"] for job in response.json()]
        token = response.headers.get("X-Next-Token")
        if token is None:
            assert "Link" not in response.headers
            break
        assert response.headers["Link"].endswith('>; rel="next"') and f"next={token}" in response.headers["Link"]
        params = params | {"next": token}
    assert seen == [f"a-{n}" for n in reversed(range(7))]


def test_list_without_parameters_is_todays_oldest_first_first_page(
    client: TestClient, tenants: Tenants, fake: FakeFacade
) -> None:
    for n in range(DEFAULT_PAGE_JOBS + 2):
        fake.add(view(f"a-{n:03d}", "team-a"))
    response = client.get("/v1/jobs", headers=bearer(tenants.a))
    assert [job["job_id"] for job in response.json()] == [f"a-{n:03d}" for n in range(DEFAULT_PAGE_JOBS)]
    assert "X-Next-Token" in response.headers


def test_list_filters_by_status_name_framework_time_and_text(
    client: TestClient, tenants: Tenants, fake: FakeFacade
) -> None:
    fake.add(view("a-1", "team-a", status="FAILED", submitted_at="2026-11-20T00:00:00+00:00"))
    fake.add(view("a-2", "team-a", status="QUEUED", name="resnet", reason="waiting for 2 GPU(s)"))
    fake.add(view("a-3", "team-a", status="COMPLETED"))
    fake.frameworks["a-3"] = "tensorflow"
    headers = bearer(tenants.a)

    def listed(params: dict[str, str] | list[tuple[str, str]]) -> list[str]:
        response = client.get("/v1/jobs", params=params, headers=headers)
        assert response.status_code == 200, response.text
        return [job["job_id"] for job in response.json()]

    assert listed([("status", "failed,queued")]) == ["a-1", "a-2"]
    assert listed([("status", "FAILED"), ("status", "COMPLETED")]) == ["a-1", "a-3"]
    assert listed({"name": "resnet"}) == ["a-2"]
    assert listed({"framework": "tensorflow"}) == ["a-3"]
    assert listed({"since": "2026-11-21T00:00:00Z"}) == ["a-2", "a-3"]
    assert listed({"until": "2026-11-21T00:00:00Z"}) == ["a-1"]
    assert listed({"q": "gpu"}) == ["a-2"]


def test_a_page_stops_at_its_byte_bound_and_the_token_goes_on_from_there(
    client: TestClient, tenants: Tenants, fake: FakeFacade
) -> None:
    for n in range(40):
        fake.add(view(f"a-{n:02d}", "team-a", reason="x" * 20_000))
    seen: list[str] = []
    params = {"limit": "40"}
    while True:
        response = client.get("/v1/jobs", params=params, headers=bearer(tenants.a))
        assert len(response.content) <= MAX_PAGE_BYTES
        seen += [job["job_id"] for job in response.json()]
        if "X-Next-Token" not in response.headers:
            break
        params = params | {"next": response.headers["X-Next-Token"]}
    assert seen == [f"a-{n:02d}" for n in range(40)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "last tuesday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"next": "not-a-token"}, "next"),
        ({"sort": "age"}, "sort"),
        ({"status": "FINISHED"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": str(MAX_PAGE_JOBS + 1)}, "limit"),
    ],
)
def test_a_bad_list_parameter_is_refused_naming_it(
    client: TestClient, tenants: Tenants, fake: FakeFacade, params: dict[str, str], field: str
) -> None:
    fake.add(view("a-1", "team-a"))
    response = client.get("/v1/jobs", params=params, headers=bearer(tenants.a))
    assert response.status_code in (400, 422)
    assert response.json()["error"] == "bad_request"
    assert field in response.json()["message"]


def test_logs_of_an_earlier_attempt_by_range(client: TestClient, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="PROCESSING"), log=b"resumed at step 40\n")
    fake.jobs["a-1"].past_logs = [b"step 10\nstep 20\nhalted: preempted\n"]
    headers = bearer(tenants.a)
    first = client.get("/v1/jobs/a-1/logs", params={"attempt": 1}, headers=headers)
    assert first.content == b"step 10\nstep 20\nhalted: preempted\n"
    assert (first.headers["X-Attempt"], first.headers["X-Finished"]) == ("1", "true")
    window = client.get("/v1/jobs/a-1/logs", params={"attempt": 1, "offset": 8, "length": 8}, headers=headers)
    assert window.content == b"step 20\n"
    assert (window.headers["X-Next-Offset"], window.headers["X-Log-Size"], window.headers["X-Finished"]) == (
        "16",
        "34",
        "false",
    )
    latest = client.get("/v1/jobs/a-1/logs", params={"learner": 1}, headers=headers)
    assert latest.headers["X-Attempt"] == "2"
    missing = client.get("/v1/jobs/a-1/logs", params={"attempt": 3}, headers=headers)
    assert (missing.status_code, missing.json()["error"]) == (400, "bad_request")
    assert missing.json()["message"] == "attempt: job a-1 has attempts 1..2; got 3"
    assert client.get("/v1/jobs/a-1/logs", params={"attempt": 0}, headers=headers).status_code == 422
