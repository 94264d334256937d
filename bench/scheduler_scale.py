"""The scheduler with 1,000 queued and 200 running jobs in the real etcd.

Writes the jobs the way JobStore does (spec, credentials, status, history; the running ones with their learners'
status, alive and metrics keys), then:

- times `Scheduler.loop.rebuild()` of a fresh Scheduler on the Docker backend (target <= 5 s);
- starts the real API over the real Scheduler (Docker backend, its loop running) in a child process and
  times `GET /v1/jobs` (target p50 <= 200 ms) and `GET /v1/jobs/{id}` (target p50 <= 50 ms) through HTTP.

The queued jobs wait out a backoff (``not_before`` an hour ahead) so the queue stays as written; nothing is
deployed. Needs etcd and the Docker engine, no images.
Usage: python bench/scheduler_scale.py [--queued N --running N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import stored_jobs
from serving import once_served

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.jobs.state import JobState
from learnerkit.scheduler.jobs.store import JobStore


async def write_jobs(etcd_endpoint: str, queued: int, running: int) -> None:
    """The first ``running`` PROCESSING on the Docker backend's node with their learner's status and metrics, the
    rest queued behind a backoff of an hour."""
    from controller_sidecar import keys
    from controller_sidecar.status import Phase, StatusRecord
    from learnerkit.scheduler.admission.stage import Stage
    from learnerkit.scheduler.backends.docker import NODE_NAME
    from learnerkit.scheduler.jobs.state import JobStatus

    now = time.time()

    async def then(i: int, state: JobState, store: JobStore, etcd: EtcdStore) -> None:
        if i >= running:
            await store.save(state.evolve(not_before=now + 3600, reason="backing off", history_sequence=1))
            return
        status = JobStatus.PROCESSING
        await store.save(
            state.evolve(status=status, stage=Stage.RUNNING, nodes=(NODE_NAME,), admitted_at=now, history_sequence=1)
        )
        record = StatusRecord(Phase.PROCESSING, datetime.now(UTC), 1, 3, message="training")
        await etcd.put(keys.learner_status_key(state.job_id, 1), record.to_json())
        await etcd.put(keys.learner_metrics_key(state.job_id, 1), json.dumps({"loss": 0.1, "accuracy": 0.9}))

    await stored_jobs.write_jobs(etcd_endpoint, queued + running, lambda _i: "scale-bench", then, batch=50)


async def time_rebuild(etcd_endpoint: str) -> tuple[float, int]:
    from controller_sidecar.etcdstore import EtcdStore
    from controller_sidecar.settings import EtcdSettings
    from learnerkit.scheduler.backends.docker import DockerBackend
    from learnerkit.scheduler.core.scheduler import Scheduler
    from learnerkit.scheduler.jobs.store import JobStore

    etcd = await EtcdStore.connect(EtcdSettings(endpoints=(etcd_endpoint,)))
    scheduler = Scheduler(JobStore(etcd), DockerBackend(), stored_jobs.options(etcd_endpoint))
    started = time.perf_counter()
    await scheduler.loop.rebuild()
    took = time.perf_counter() - started
    await etcd.close()
    return took, len(scheduler.shared.jobs)


def p50_ms(call: object, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--running", type=int, default=200)
    parser.add_argument("--serve", nargs=3, metavar=("ETCD", "TOKENS", "FD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        stored_jobs.serve(args.serve[0], Path(args.serve[1]), int(args.serve[2]))
        return 0

    with stored_jobs.fresh_etcd("lk-bench-scale-") as stored:
        started = time.perf_counter()
        asyncio.run(write_jobs(stored.etcd_endpoint, args.queued, args.running))
        print(f"wrote {args.queued} queued + {args.running} running jobs in {time.perf_counter() - started:.1f} s")
        rebuilds = [asyncio.run(time_rebuild(stored.etcd_endpoint)) for _ in range(3)]
        rebuild_s = statistics.median(took for took, _ in rebuilds)
        print(f"rebuild() of {rebuilds[0][1]} jobs: median of 3 {rebuild_s:.2f} s  (target <= 5 s)")

        with stored_jobs.api_child(__file__, stored, 120) as (client, child):
            jobs = once_served(lambda: client.list_jobs(), child, 120)
            assert len(jobs) == args.queued + args.running, len(jobs)
            running_id, queued_id = jobs[0].job_id, jobs[-1].job_id
            list_ms = p50_ms(client.list_jobs, 20)
            status_running = p50_ms(lambda: client.get(running_id), 50)
            status_queued = p50_ms(lambda: client.get(queued_id), 50)
            # Every page of GET /v1/jobs (500 jobs each, bench/job_list.py times one page): what the list cost before.
            print(f"GET /v1/jobs, every page ({len(jobs)} jobs): p50 {list_ms:.1f} ms  (target <= 200 ms)")
            print(
                f"GET /v1/jobs/ID, running: p50 {status_running:.1f} ms; queued: p50 {status_queued:.1f} ms"
                "  (target <= 50 ms)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
