"""The platform's CPU per promotion, in place against by a new deploy (bench/sweeps.py --in-place).

The scheduler runs in this process (its loop on the event loop here, as `learnerkit scheduler serve` runs it) over an
etcd and a SeaweedFS of its own; each learner pair is this checkout's real sidecar and `learner-run` as processes of
this host (`bench/processbackend.py`: no Docker, so the figure is the sidecar's and the scheduler's work alone,
without the engine's). Three sweeps of the same trials, each training 8 steps of `STEP_S`:

- **baseline**: random search straight to step 8 (no rung, no promotion);
- **by redeploy**: the median rule over rungs 2, 4, 8; with 3 trials every trial continues at each rung (the rule
  stops from 3 others on), and the learner ends its rung: each promotion is a new attempt, a new pair;
- **in place**: the same, with a learner that asks for its next budget (`learner.next_budget`).

A first baseline sweep, not counted, warms the scheduler (its first S3 client, imports). The platform's CPU-seconds
are the scheduler's (this process's, `getrusage`, over the sweep) and the sidecars' (each
one's own `getrusage` at its exit); per promotion: (the sweep's - the baseline's) / its promotions.
"""

from __future__ import annotations

import asyncio
import resource
import tempfile
import time
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from benchjobs import DATA_BUCKET, RESULTS_BUCKET, manifest
from processbackend import ProcessBackend

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.s3 import SeaweedServer
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.jobs.store import JobStore

TENANT = "bench"
ROOT = "/bench/jobs"
STEP_S = 0.1
TRIALS = 3
TARGET_CPU_S = 0.2
CPUS, MEMORY = 0.2, "256Mb"

TRAIN = """\
import os, time
import learner

lr = float(os.environ["lr"])
limit = learner.budget()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
while not limit.reached(step):
    time.sleep(float(os.environ["STEP_S"]))
    step += 1
    learner.log_metrics(step, val_loss=lr + 1.0 / step)
    if os.environ.get("IN_PLACE") and limit.reached(step):
        limit = learner.next_budget(step) or limit
with learner.new_checkpoint(step) as path:
    (path / "step").write_text(str(step))
"""


def search(algorithm: str, low: int) -> str:
    eta = ", eta: 2" if algorithm == "median_stop" else ""
    return (
        "manifest: manifest.yml\nparameters:\n  lr: {type: choice, values: [0.1, 0.2, 0.3]}\n"
        f"objective: {{metric: val_loss, goal: minimize}}\nbudget: {{unit: step, min: {low}, max: 8}}\n"
        f"algorithm: {{name: {algorithm}{eta}}}\ntrials: {TRIALS}\nconcurrency: {TRIALS}\nseed: 1\n"
    )


@dataclass(frozen=True)
class Run:
    name: str
    promotions: int
    learner_starts: int
    scheduler_cpu_s: float
    sidecar_cpu_s: float
    wall_s: float

    @property
    def platform_cpu_s(self) -> float:
        return self.scheduler_cpu_s + self.sidecar_cpu_s


def own_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def one_sweep(
    scheduler: Scheduler, backend: ProcessBackend, s3: SeaweedServer, model: bytes, name: str, text: str, command: str
) -> Run:
    sidecars_before, cpu_before, started = backend.sidecar_cpu_s(), own_cpu_s(), time.monotonic()
    view = await scheduler.submit_sweep(TENANT, text, manifest(s3, command, CPUS, MEMORY), model=chunks(model))
    while (view := await scheduler.get_sweep(TENANT, view.sweep_id)).status == "running":
        await asyncio.sleep(0.2)
    jobs = [t.job_id for t in view.trials]
    while any(job in backend.pairs for job in jobs):  # the last pairs' teardown, which ends their sidecars
        await asyncio.sleep(0.2)
    wall, cpu = time.monotonic() - started, own_cpu_s() - cpu_before
    if view.status != "done" or any(t.state != "completed" for t in view.trials):
        raise SystemExit(f"{name}: the sweep ended {view.status}: {[(t.state, t.reason) for t in view.trials]}")
    driver = scheduler.loop.driver
    assert driver is not None
    decisions = await driver.store.decisions(view.sweep_id)
    promotions = sum(1 for d in decisions if d.action.value in ("promote", "continue"))
    starts = sum(backend.learner_starts.get(job, 0) for job in jobs)
    return Run(name, promotions, starts, cpu, backend.sidecar_cpu_s() - sidecars_before, wall)


async def measure(base: Path, runs: int) -> list[Run]:
    etcd, s3 = EtcdServer("/usr/bin/etcd", base / "etcd"), SeaweedServer(base / "s3")
    etcd.start()
    s3.start()
    backend = ProcessBackend(base / "pairs")
    try:
        objects = s3.client()
        for bucket in (DATA_BUCKET, RESULTS_BUCKET):
            objects.create_bucket(Bucket=bucket)
        objects.put_object(Bucket=DATA_BUCKET, Key="data.csv", Body=b"x\n1\n")
        options = SchedulerOptions(
            platform=Platform(etcd_endpoints=etcd.endpoint, sidecar_image="sidecar", etcd_root=ROOT),
            catalog=None,
            resolve_image=lambda manifest: "learner",
            policy=AdmissionPolicy(ready_timeout_s=300),
            submit_policy=SubmitPolicy(object_stores=(str(origin(s3.endpoint_url)),)),
        )
        store = await EtcdStore.connect(etcd.settings())
        scheduler = Scheduler(JobStore(store, ROOT), backend, options)
        await scheduler.loop.rebuild()
        stop = asyncio.Event()
        loop = asyncio.create_task(scheduler.loop.run(stop))
        archive = base / "model.zip"
        with zipfile.ZipFile(archive, "w") as out:
            out.writestr("train.py", TRAIN)
        model = archive.read_bytes()
        sweeps = [
            ("baseline", search("random", 8), f"STEP_S={STEP_S} python3 train.py"),
            ("by redeploy", search("median_stop", 2), f"STEP_S={STEP_S} python3 train.py"),
            ("in place", search("median_stop", 2), f"IN_PLACE=1 STEP_S={STEP_S} python3 train.py"),
        ]
        await one_sweep(scheduler, backend, s3, model, *sweeps[0])  # warm: the first sweep's imports are not its own
        measured = []
        for _ in range(runs):
            for name, text, command in sweeps:
                measured.append(await one_sweep(scheduler, backend, s3, model, name, text, command))
        stop.set()
        await loop
        await store.close()
        return measured
    finally:
        backend.close()
        etcd.stop()
        s3.stop()


def in_place_figures(runs: int = 1) -> bool:
    """Print the figures; False when the in-place target is missed."""
    with tempfile.TemporaryDirectory(prefix="lk-inplace-bench-") as tmp:
        measured = asyncio.run(measure(Path(tmp), runs))
    print(f"promotion in place: {TRIALS} trials of 8 steps of {STEP_S} s, rungs 2, 4, 8; process pairs, no engine")
    heads = ("promotions", 10), ("learners", 8), ("scheduler", 9), ("sidecars", 8), ("platform", 8), ("wall s", 6)
    print(f"  {'sweep':<12} " + " ".join(f"{head:>{width}}" for head, width in heads))
    for run in measured:
        print(
            f"  {run.name:<12} {run.promotions:>10} {run.learner_starts:>8} {run.scheduler_cpu_s:>9.2f}"
            f" {run.sidecar_cpu_s:>8.2f} {run.platform_cpu_s:>8.2f} {run.wall_s:>6.1f}"
        )
    met = True
    for index in range(0, len(measured), 3):
        baseline, redeploy, in_place = measured[index : index + 3]
        per = {r.name: (r.platform_cpu_s - baseline.platform_cpu_s) / r.promotions for r in (redeploy, in_place)}
        ok = per["in place"] <= TARGET_CPU_S
        met = met and ok
        print(
            f"  platform CPU-s per promotion: in place {per['in place']:.3f} (target <= {TARGET_CPU_S}:"
            f" {'met' if ok else 'MISSED'}), by redeploy {per['by redeploy']:.3f} (sidecar and scheduler only;"
            f" the engine's share and the learner's start come on top on Docker); wall: in place"
            f" {in_place.wall_s / redeploy.wall_s:.2f}x by redeploy"
        )
    return met
