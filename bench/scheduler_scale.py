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
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from serving import once_served, serve_scheduler, start_api

REPO = Path(__file__).resolve().parents[1]
TENANT = "bench"
S3 = "http://127.0.0.1:9"
MANIFEST = f"""\
name: scale-bench
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


def options(etcd_endpoint: str) -> object:
    from learnerkit.scheduler.config.policy import SubmitPolicy
    from learnerkit.scheduler.core.options import SchedulerOptions
    from learnerkit.scheduler.core.planning import Platform
    from learnerkit.scheduler.images.catalog import ImageCatalog

    catalog = ImageCatalog(REPO)
    return SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_endpoint, sidecar_image="unused"),
        catalog=catalog.frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(S3,)),
    )


async def write_jobs(etcd_endpoint: str, queued: int, running: int) -> None:
    from controller_sidecar import keys
    from controller_sidecar.etcdstore import EtcdStore
    from controller_sidecar.settings import EtcdSettings
    from controller_sidecar.status import Phase, StatusRecord
    from learnerkit.scheduler.admission.stage import Stage
    from learnerkit.scheduler.backends.docker import NODE_NAME
    from learnerkit.scheduler.jobs.state import JobState, JobStatus
    from learnerkit.scheduler.jobs.store import JobStore
    from learnerkit.scheduler.manifest.parser import parse_manifest

    etcd = await EtcdStore.connect(EtcdSettings(endpoints=(etcd_endpoint,)))
    store = JobStore(etcd)
    spec = {"manifest": parse_manifest(MANIFEST, "manifest.yml", None).to_dict(), "tenant": TENANT}
    now = time.time()

    async def one(i: int) -> None:
        job_id = f"job-{i:012d}"
        state = JobState(job_id, TENANT, "scale-bench", now - 10_000 + i)
        await store.create(state, {**spec, "job_id": job_id}, MANIFEST, "manifest.yml")
        if i < running:
            state = state.evolve(
                status=JobStatus.PROCESSING,
                stage=Stage.RUNNING,
                nodes=(NODE_NAME,),
                admitted_at=now,
                history_sequence=1,
            )
            await store.save(state)
            record = StatusRecord(Phase.PROCESSING, datetime.now(UTC), 1, 3, message="training")
            await etcd.put(keys.learner_status_key(job_id, 1), record.to_json())
            await etcd.put(keys.learner_metrics_key(job_id, 1), json.dumps({"loss": 0.1, "accuracy": 0.9}))
        else:
            await store.save(state.evolve(not_before=now + 3600, reason="backing off", history_sequence=1))

    for start in range(0, queued + running, 50):
        await asyncio.gather(*(one(i) for i in range(start, min(start + 50, queued + running))))
    await etcd.close()


async def time_rebuild(etcd_endpoint: str) -> tuple[float, int]:
    from controller_sidecar.etcdstore import EtcdStore
    from controller_sidecar.settings import EtcdSettings
    from learnerkit.scheduler.backends.docker import DockerBackend
    from learnerkit.scheduler.core.scheduler import Scheduler
    from learnerkit.scheduler.jobs.store import JobStore

    etcd = await EtcdStore.connect(EtcdSettings(endpoints=(etcd_endpoint,)))
    scheduler = Scheduler(JobStore(etcd), DockerBackend(), options(etcd_endpoint))  # type: ignore[arg-type]
    started = time.perf_counter()
    await scheduler.loop.rebuild()
    took = time.perf_counter() - started
    await etcd.close()
    return took, len(scheduler.shared.jobs)


def serve(etcd_endpoint: str, tokens: Path, fd: int) -> None:
    """The child: the real API over the real Scheduler on the Docker backend, its loop running."""

    from learnerkit.scheduler.backends.docker import DockerBackend
    from learnerkit.scheduler.core.scheduler import Scheduler
    from learnerkit.scheduler.jobs.store import JobStore

    store = JobStore()
    scheduler = Scheduler(store, DockerBackend(), options(etcd_endpoint))  # type: ignore[arg-type]

    serve_scheduler(scheduler, store, etcd_endpoint, tokens, fd)


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
        serve(args.serve[0], Path(args.serve[1]), int(args.serve[2]))
        return 0

    from learnerkit.dev.etcd import EtcdServer
    from learnerkit.scheduler.api.auth import add_token
    from learnerkit.scheduler.client.http import SchedulerClient

    with tempfile.TemporaryDirectory(prefix="lk-bench-scale-") as tmp:
        etcd = EtcdServer("/usr/bin/etcd", Path(tmp) / "etcd" / "data")
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, TENANT)
        etcd.start()
        child = None
        try:
            started = time.perf_counter()
            asyncio.run(write_jobs(etcd.endpoint, args.queued, args.running))
            print(f"wrote {args.queued} queued + {args.running} running jobs in {time.perf_counter() - started:.1f} s")
            rebuilds = [asyncio.run(time_rebuild(etcd.endpoint)) for _ in range(3)]
            rebuild_s = statistics.median(took for took, _ in rebuilds)
            print(f"rebuild() of {rebuilds[0][1]} jobs: median of 3 {rebuild_s:.2f} s  (target <= 5 s)")

            child, port = start_api([sys.executable, __file__, "--serve", etcd.endpoint, str(tokens)])
            client = SchedulerClient(f"http://127.0.0.1:{port}", token, timeout_s=120)
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
        finally:
            if child is not None:
                child.terminate()
                child.wait(30)
            etcd.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
