"""`GET /v1/jobs` paged, sorted and filtered as a client walks it: the real REST API (uvicorn on 127.0.0.1) over a
real Scheduler restored from jobs written to the real etcd as JobStore writes them; nothing is deployed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.errors import ApiError
from learnerkit.scheduler.facade import JobQuery
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.scheduler.restored import restored_scheduler

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

S3 = "http://127.0.0.1:9"
MANIFEST = f"""\
name: list-test
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "{S3}", user_name: "key", password: "secret"}}
framework:
  name: pytorch
  version: "2.13"
  command: "true"
"""
NAMES = ("mnist", "resnet-50", "bert")
JOBS = 60


@dataclass(frozen=True)
class Listed:
    client: SchedulerClient
    states: list[JobState]
    """team-a's jobs as written."""


async def _write(store: JobStore) -> list[JobState]:
    spec = {"manifest": parse_manifest(MANIFEST, "manifest.yml", None).to_dict()}
    written: list[JobState] = []
    for n in range(JOBS + 3):
        tenant = "team-a" if n < JOBS else "team-b"
        job_id = f"job-{uuid.uuid4().hex[:12]}"
        state = JobState(job_id, tenant, NAMES[n % 3], 1_800_000_000.0 + (n * 37) % JOBS)
        await store.create(state, {**spec, "tenant": tenant, "job_id": job_id}, MANIFEST, "manifest.yml")
        if n % 4 == 0:
            state = state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user")
        else:
            state = state.evolve(not_before=4e9, reason="backing off")  # stays queued: nothing is deployed
        state = await store.save(state)
        if tenant == "team-a":
            written.append(state)
    return written


@pytest.fixture
def listed(etcd_server: Any, tmp_path: Path) -> Iterator[Listed]:
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "team-a")
    with restored_scheduler(etcd_server, tokens, (S3,), _write) as (url, states):
        yield Listed(SchedulerClient(url, token), states)


def _walk(client: SchedulerClient, query: JobQuery) -> list[str]:
    seen: list[str] = []
    while True:
        page = client.page_jobs(query)
        assert len(page.jobs) <= query.limit
        seen += [job.job_id for job in page.jobs]
        if page.next is None:
            return seen
        query = replace(query, next=page.next)


@pytest.mark.parametrize("sort", ["submitted", "name", "status"])
def test_pages_walk_the_tenants_jobs_once_in_each_order(listed: Listed, sort: str) -> None:
    def key(state: JobState) -> tuple[Any, float, str]:
        value = {"submitted": state.submitted_at, "name": state.name, "status": state.status.value}[sort]
        return (value, state.submitted_at, state.job_id)

    expected = [s.job_id for s in sorted(listed.states, key=key, reverse=True)]
    assert _walk(listed.client, JobQuery(limit=7, sort=sort, descending=True)) == expected


def test_filters_and_the_total_over_every_page(listed: Listed) -> None:
    halted = {s.job_id for s in listed.states if s.status is JobStatus.HALTED}
    page = listed.client.page_jobs(JobQuery(limit=5, statuses=frozenset({"HALTED"})))
    assert page.total == len(halted) and page.next is not None
    assert set(_walk(listed.client, JobQuery(limit=5, statuses=frozenset({"HALTED"})))) == halted
    resnets = {s.job_id for s in listed.states if s.name == "resnet-50"}
    assert set(_walk(listed.client, JobQuery(limit=50, name="resnet-50"))) == resnets
    assert set(_walk(listed.client, JobQuery(limit=50, search="RESNET"))) == resnets
    assert _walk(listed.client, JobQuery(limit=50, framework="tensorflow")) == []
    early = {s.job_id for s in listed.states if s.submitted_at < 1_800_000_010.0}
    assert set(_walk(listed.client, JobQuery(limit=50, until=1_800_000_010.0))) == early
    assert listed.client.list_jobs() == [j for j in listed.client.list_jobs() if j.tenant == "team-a"]
    assert len(listed.client.list_jobs()) == JOBS


def test_a_token_of_another_query_is_a_400_naming_next(listed: Listed) -> None:
    token = listed.client.page_jobs(JobQuery(limit=3)).next
    with pytest.raises(ApiError, match="400 next: the token belongs to a query with other filters"):
        listed.client.page_jobs(JobQuery(limit=3, next=token, name="bert"))
