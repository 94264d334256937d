"""The job list of a tenant with 10,000 jobs in the real etcd, paged through the real REST API.

Writes the jobs the way JobStore does (spec, credentials, status, history; a quarter HALTED, the rest queued
behind a backoff so nothing is deployed), starts the real API over the real Scheduler in a child process, then
measures through HTTP, all in this run:

- the baseline: `GET /v1/jobs/{id}` of one job (p50);
- the first page (`GET /v1/jobs`, the default 50 jobs), newest first, and filtered (status, text): p50 time,
  response bytes and the time's ratio to the baseline;
- every page of the largest size (500) walked to the end: the slowest page and the largest response
  (target: each page <= 256 KiB);
- the whole list as it was served before paging (every job's view in one body, from the same views), for scale.

Needs etcd and the Docker engine, no images.
Usage: python bench/job_list.py [--jobs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import stored_jobs
from serving import once_served

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.store import JobStore

NAMES = ("mnist-small", "resnet-50", "bert-base", "pytorch-smoke")
PAGE_TARGET_BYTES = 256 * 1024


async def write_jobs(etcd_endpoint: str, count: int) -> None:
    """A quarter HALTED, the rest queued behind a backoff of ten hours."""
    from learnerkit.scheduler.admission.stage import Stage
    from learnerkit.scheduler.jobs.state import JobStatus

    now = time.time()

    async def then(i: int, state: JobState, store: JobStore, _etcd: EtcdStore) -> None:
        if i % 4 == 0:
            ended = state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user")
            await store.save(ended.evolve(history_sequence=1))
        else:
            await store.save(state.evolve(not_before=now + 36_000, reason="backing off", history_sequence=1))

    await stored_jobs.write_jobs(etcd_endpoint, count, lambda i: NAMES[i % len(NAMES)], then, batch=100)


def timed(call: Callable[[], object], runs: int) -> tuple[float, object]:
    """The median milliseconds of ``runs`` calls, and the last call's answer."""
    times, answer = [], None
    for _ in range(runs):
        started = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--serve", nargs=3, metavar=("ETCD", "TOKENS", "FD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        stored_jobs.serve(args.serve[0], Path(args.serve[1]), int(args.serve[2]))
        return 0

    from learnerkit.scheduler.facade import MAX_PAGE_JOBS, JobQuery

    with stored_jobs.fresh_etcd("lk-bench-list-") as stored:
        started = time.perf_counter()
        asyncio.run(write_jobs(stored.etcd_endpoint, args.jobs))
        print(f"wrote {args.jobs} jobs of one tenant in {time.perf_counter() - started:.1f} s")
        with stored_jobs.api_child(__file__, stored, 300) as (client, child):
            first = once_served(lambda: client.page_jobs(JobQuery()), child, 300)
            assert first.total == args.jobs, first.total

            def raw(path: str, params: list[tuple[str, str]] | None = None) -> bytes:
                return client._request("GET", path, params=params).body

            baseline_ms, one = timed(lambda: raw(f"/v1/jobs/{first.jobs[0].job_id}"), args.runs)
            print(f"baseline GET /v1/jobs/ID: p50 {baseline_ms:.1f} ms, {len(one):,} bytes")  # type: ignore[arg-type]
            cases = {
                "first page (default, oldest first)": [],
                "first page, newest first": [("sort", "-submitted")],
                "first page, status=HALTED": [("status", "HALTED")],
                "first page, q=resnet, by name": [("q", "resnet"), ("sort", "name")],
            }
            for label, params in cases.items():
                ms, body = timed(lambda params=params: raw("/v1/jobs", params), args.runs)  # type: ignore[misc]
                size = len(body)  # type: ignore[arg-type]
                verdict = "meets" if size <= PAGE_TARGET_BYTES else "MISSES"
                print(
                    f"{label}: p50 {ms:.1f} ms = {ms / baseline_ms:.1f}x the baseline; {size:,} bytes "
                    f"(target <= {PAGE_TARGET_BYTES:,}: {verdict})"
                )

            query, pages, slowest, largest, seen = JobQuery(limit=MAX_PAGE_JOBS), 0, 0.0, 0, 0
            while True:
                params = [("limit", str(query.limit))] + ([("next", query.next)] if query.next else [])
                began = time.perf_counter()
                answer = client._request("GET", "/v1/jobs", params=params)
                slowest = max(slowest, (time.perf_counter() - began) * 1000)
                largest = max(largest, len(answer.body))
                seen += len(json.loads(answer.body))
                pages += 1
                token_next = answer.headers.get("x-next-token")
                if token_next is None:
                    break
                query = replace(query, next=token_next)
            assert seen == args.jobs, seen
            verdict = "meets" if largest <= PAGE_TARGET_BYTES else "MISSES"
            print(
                f"every page at limit={MAX_PAGE_JOBS}: {pages} pages, {seen} jobs; slowest {slowest:.1f} ms "
                f"= {slowest / baseline_ms:.1f}x the baseline; largest {largest:,} bytes "
                f"(target <= {PAGE_TARGET_BYTES:,}: {verdict})"
            )
            all_ms, every = timed(client.list_jobs, 1)
            whole = len(json.dumps([asdict(job) for job in every]))  # type: ignore[attr-defined]
            print(
                f"every job as one body (what GET /v1/jobs sent before paging): about {whole:,} bytes; "
                f"the client's walk of every page: {all_ms:.0f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
