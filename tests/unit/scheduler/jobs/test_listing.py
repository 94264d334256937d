"""The job list's selection: filters, the three orders both ways, and keyset tokens."""

from __future__ import annotations

from dataclasses import replace

import pytest

from learnerkit.common.errors import ConfigError
from learnerkit.common.instants import parse_instant
from learnerkit.scheduler.errors import InvalidRequestError
from learnerkit.scheduler.facade import JobQuery
from learnerkit.scheduler.jobs.listing import ListedJob, select

STATUSES = ("QUEUED", "PROCESSING", "COMPLETED", "FAILED")
JOBS = [
    ListedJob(
        job_id=f"job-{n:02d}",
        name=("mnist", "resnet", "bert")[n % 3],
        status=STATUSES[n % 4],
        framework=("pytorch", "tensorflow")[n % 2],
        submitted_at=1000.0 + (n * 7) % 23,  # not in id order, some equal
        reason="waiting for 2 GPU(s)" if n % 5 == 0 else "",
    )
    for n in range(23)
]


def walk(jobs: list[ListedJob], query: JobQuery) -> list[str]:
    seen: list[str] = []
    while True:
        page = select(jobs, query)
        assert len(page.job_ids) <= query.limit
        seen += page.job_ids
        if not page.more:
            return seen
        query = replace(query, next=page.cursors[-1])


@pytest.mark.parametrize("sort", ["submitted", "name", "status"])
@pytest.mark.parametrize("descending", [False, True])
def test_pages_walk_every_job_once_in_order(sort: str, descending: bool) -> None:
    expected = [j.job_id for j in sorted(JOBS, key=lambda j: j.key(sort), reverse=descending)]
    assert walk(JOBS, JobQuery(limit=4, sort=sort, descending=descending)) == expected


def test_filters_combine() -> None:
    query = JobQuery(limit=100, statuses=frozenset({"QUEUED", "FAILED"}), framework="pytorch", name="mnist")
    chosen = select(JOBS, query)
    expected = {j.job_id for j in JOBS if j.status in {"QUEUED", "FAILED"} and j.framework == "pytorch"}
    assert set(chosen.job_ids) == {i for i in expected if next(j for j in JOBS if j.job_id == i).name == "mnist"}
    assert chosen.total == len(chosen.job_ids) > 0


def test_since_is_inclusive_and_until_exclusive() -> None:
    chosen = select(JOBS, JobQuery(limit=100, since=1005.0, until=1010.0))
    assert sorted({JOBS[int(i[4:])].submitted_at for i in chosen.job_ids}) == [1005.0, 1006.0, 1007.0, 1008.0, 1009.0]


def test_search_finds_text_in_the_id_name_or_reason_in_any_case() -> None:
    assert set(select(JOBS, JobQuery(limit=100, search="GPU")).job_ids) == {f"job-{n:02d}" for n in (0, 5, 10, 15, 20)}
    assert select(JOBS, JobQuery(limit=100, search="job-07")).job_ids == ("job-07",)
    assert select(JOBS, JobQuery(limit=100, search="BeRt")).total == sum(j.name == "bert" for j in JOBS)


def test_a_job_submitted_between_pages_neither_repeats_nor_shifts_a_row() -> None:
    query = JobQuery(limit=5, sort="submitted", descending=True)
    first = select(JOBS, query)
    newer = [*JOBS, ListedJob("job-new", "mnist", "QUEUED", "pytorch", 5000.0)]
    rest = walk(newer, replace(query, next=first.cursors[-1]))
    assert [*first.job_ids, *rest] == [j.job_id for j in sorted(JOBS, key=lambda j: j.key("submitted"), reverse=True)]


def test_a_token_of_another_query_is_refused_and_so_is_garbage() -> None:
    token = select(JOBS, JobQuery(limit=3)).cursors[-1]
    with pytest.raises(InvalidRequestError, match="another order"):
        select(JOBS, JobQuery(limit=3, next=token, sort="name"))
    with pytest.raises(InvalidRequestError, match="other filters"):
        select(JOBS, JobQuery(limit=3, next=token, statuses=frozenset({"QUEUED"})))
    with pytest.raises(InvalidRequestError, match="not a next token"):
        select(JOBS, JobQuery(limit=3, next="bm90IGEgdG9rZW4"))


def test_the_limit_may_change_between_pages() -> None:
    token = select(JOBS, JobQuery(limit=3)).cursors[-1]
    assert len(select(JOBS, JobQuery(limit=7, next=token)).job_ids) == 7


def test_a_bad_sort_or_time_names_its_field() -> None:
    with pytest.raises(InvalidRequestError, match=r"^sort:"):
        select(JOBS, JobQuery(sort="age"))
    with pytest.raises(InvalidRequestError, match=r"^status: expected any of CANCELLED, COMPLETED, .*; got FINISHED$"):
        select(JOBS, JobQuery(statuses=frozenset({"FINISHED", "FAILED"})))
    with pytest.raises(ConfigError, match=r"^since:"):
        parse_instant("since", "yesterday")
    assert parse_instant("until", "1970-01-01T00:01:00Z") == 60.0
    assert parse_instant("until", "1970-01-01T00:01:00") == 60.0
