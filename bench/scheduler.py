"""Scheduler benchmark on the Docker backend, every figure in one run (FfDL's own table, measured here).

- submit -> the learner's command started, p50 and p95, images present (target p50 <= 3 s);
- 10, 20, 30, 40 concurrent small jobs: mean completion time and platform overhead (completion minus the
  learner command's own run time, both from timestamps the command prints); target: overhead growth from
  10 to 40 jobs <= 10 % (FfDL reported +62 % total);
- admission: one full pass over 10,000 queued jobs and 1,000 GPU nodes (bench/scheduler_admission.py).

It starts its own etcd and SeaweedFS on loopback and needs the PyTorch and sidecar images (`make images`).
Usage: python bench/scheduler.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.s3 import SeaweedServer
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.core import Scheduler, SchedulerOptions
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.images import ImageCatalog
from learnerkit.scheduler.jobstore import JobStore
from learnerkit.scheduler.planning import Platform
from learnerkit_build.render import BuildInputs
from learnerkit_build.sidecarimage import build_sidecar

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")
TENANT = "bench"
TERMINAL = {"COMPLETED", "FAILED", "HALTED", "CANCELLED"}
RUN_S = 5.0
"""How long each small job's command runs."""


class Running:
    """The service's loop on a thread of its own."""

    def __init__(self, etcd: EtcdServer, options: SchedulerOptions) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.stop = asyncio.Event()
        self.service: Scheduler = self.call(self._start(etcd, options))

    async def _start(self, etcd: EtcdServer, options: SchedulerOptions) -> Scheduler:
        service = Scheduler(JobStore(await EtcdStore.connect(etcd.settings())), DockerBackend(), options)
        await service.rebuild()
        self.runner = asyncio.ensure_future(service.run(self.stop))
        return service

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(300)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)


def manifest(s3: SeaweedServer, command: str) -> str:
    return f"""\
name: bench
cpus: 0.04
memory: 128Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: bench-data}}
    training_results: {{container: bench-results}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: "{command}"
"""


def wait_all(running: Running, job_ids: list[str], timeout: float = 900) -> dict[str, tuple[JobView, float]]:
    """Poll until every job is terminal; each one's view and the time it was first seen terminal."""
    done: dict[str, tuple[JobView, float]] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(job_ids) and time.monotonic() < deadline:
        for job_id in job_ids:
            if job_id not in done:
                view = running.call(running.service.get(TENANT, job_id))
                if view.status in TERMINAL:
                    done[job_id] = (view, time.time())
        time.sleep(0.05)
    return done


def stamps(running: Running, job_id: str) -> tuple[float, float]:
    """When the learner's command started and ended, from the timestamps it printed."""
    log = running.call(running.service.logs(TENANT, job_id)).read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in log.splitlines() if line.startswith(("BEGIN", "END"))}
    return values["BEGIN"], values["END"]


def start_latency(running: Running, s3: SeaweedServer, samples: int) -> list[float]:
    latencies = []
    for _ in range(samples):
        submitted = time.time()
        view = running.call(
            running.service.submit(TENANT, manifest(s3, "echo BEGIN $(date +%s.%N); echo END $(date +%s.%N)"))
        )
        wait_all(running, [view.job_id])
        latencies.append(stamps(running, view.job_id)[0] - submitted)
    return latencies


def concurrent(running: Running, s3: SeaweedServer, count: int) -> tuple[float, float]:
    """Mean completion seconds and mean platform overhead of ``count`` jobs submitted at once."""
    command = f"echo BEGIN $(date +%s.%N); sleep {RUN_S:g}; echo END $(date +%s.%N)"
    submitted: dict[str, float] = {}
    for _ in range(count):
        at = time.time()
        submitted[running.call(running.service.submit(TENANT, manifest(s3, command))).job_id] = at
    done = wait_all(running, list(submitted))
    completion, overhead = [], []
    for job_id, (view, ended) in done.items():
        if view.status != "COMPLETED":
            raise RuntimeError(f"{job_id} ended {view.status}: {view.reason}")
        begin, end = stamps(running, job_id)
        completion.append(ended - submitted[job_id])
        overhead.append(ended - submitted[job_id] - (end - begin))
    return statistics.mean(completion), statistics.mean(overhead)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples and jobs (a smoke test)")
    args = parser.parse_args()
    samples, sizes = (3, (2, 4)) if args.quick else (10, (10, 20, 30, 40))
    sidecar = build_sidecar(REPO, BuildInputs(ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt")), lambda _: None)
    catalog = ImageCatalog(REPO)
    with tempfile.TemporaryDirectory(prefix="lk-bench-") as tmp:
        etcd, s3 = EtcdServer("/usr/bin/etcd", Path(tmp) / "etcd" / "data"), SeaweedServer(Path(tmp) / "s3")
        etcd.start()
        s3.start()
        running = None
        try:
            client = s3.client()
            for bucket in ("bench-data", "bench-results"):
                client.create_bucket(Bucket=bucket)
            options = SchedulerOptions(
                platform=Platform(etcd_endpoints=etcd.endpoint, sidecar_image=sidecar.reference),
                catalog=catalog.frameworks(),
                resolve_image=catalog.resolve,
                interval_s=0.1,
            )
            running = Running(etcd, options)
            latencies = sorted(start_latency(running, s3, samples))
            p50, p95 = (
                statistics.median(latencies),
                latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
            )
            print(f"submit -> command started ({samples} jobs): p50 {p50:.2f} s, p95 {p95:.2f} s  (target p50 <= 3 s)")
            print(f"{'jobs':>5} {'mean completion s':>18} {'mean overhead s':>16} {'overhead vs first':>18}")
            rows = []
            for count in sizes:
                mean_completion, mean_overhead = concurrent(running, s3, count)
                rows.append((count, mean_completion, mean_overhead))
                print(f"{count:>5} {mean_completion:>18.2f} {mean_overhead:>16.2f} {mean_overhead / rows[0][2]:>18.2f}")
            growth = rows[-1][2] / rows[0][2] - 1
            print(
                f"overhead growth {sizes[0]} -> {sizes[-1]} jobs: {growth:+.0%}  (target <= +10 %; FfDL: +62 % total)"
            )
        finally:
            if running is not None:
                running.close()
            etcd.stop()
            s3.stop()
    admission = subprocess.run([sys.executable, str(REPO / "bench" / "scheduler_admission.py")], check=False)
    return admission.returncode


if __name__ == "__main__":
    raise SystemExit(main())
