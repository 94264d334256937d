"""The concurrency-200 half of bench/sweeps.py (issue 41): sweeps whose trials all start in one step.

- Simulated backend (`--scale`): the scheduler in this process over an etcd of its own, with a backend that
  deploys nothing (two nodes of 4 CPUs; admitted trials stay deployed, the others queued). A random sweep of
  200 trials at concurrency 200 against the baseline of the same sweep at concurrency 1, in the same run:
  every decision stored (read back from etcd), the start's wall time, and the scheduler's memory (the Python
  heap, `tracemalloc`) just after the start and after 100 more control-loop steps: flat means it does not grow
  with steps.
- The local default (`--scale-local`): `learnerkit scheduler serve` with its default backend (the container
  engine) over etcd and SeaweedFS of its own; a sweep of 200 trials at concurrency 200 through the REST client:
  accepted, and listing its 200 trials (most of them queued: each trial asks for half the engine's CPUs)
  within 2 minutes. The trials admitted run `sleep` in the PyTorch CPU learner image (it must exist: this bench
  builds nothing); the sweep is cancelled once listed, and the bench waits for every trial job to end and
  checks no container of the sweep is left (it removes any and says so).
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import LearnerkitError
from learnerkit.dev.etcd import EtcdServer
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates

TRIALS = 200
STEPS = 100
FLAT_BYTES = 1 << 20
"""What 100 control-loop steps after the start may add to the scheduler's heap (0 is flat; etcd answers vary)."""
LIST_LIMIT_S = 120.0
STORE = "http://127.0.0.1:9"
SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {{type: log_uniform, min: 0.0001, max: 0.1}}
objective: {{metric: val_loss, goal: minimize}}
budget: {{unit: step, max: 10}}
algorithm: {{name: random}}
trials: {trials}
concurrency: {concurrency}
seed: 7
"""
MANIFEST = f"""\
name: scale
cpus: 1
memory: 1Gb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "{STORE}", user_name: a, password: b}}
framework: {{name: pytorch, version: "2.13", command: "sleep 600 # ${{lr}}"}}
"""


class IdleBackend:
    """Two nodes of 4 CPUs; a deploy is only recorded, and no learner ever starts."""

    def __init__(self) -> None:
        self.deployed: list[str] = []

    def nodes(self) -> list[Node]:
        return [Node(f"node-{i}", 4.0, 64 << 30, 0, None) for i in range(2)]

    def node_health(self) -> dict[str, NodeHealth]:
        return {node.name: NodeHealth() for node in self.nodes()}

    def deploy(self, job: JobDeployment) -> None:
        self.deployed.append(job.job_id)

    def started(self, job_id: str, learners: int) -> bool:
        return False

    def sidecars(self, job_id: str) -> SidecarStates:
        return SidecarStates(running=frozenset({1}))

    def learners_running(self, job_id: str) -> set[int]:
        return set()

    def restart_sidecar(self, job_id: str, learner_id: int) -> bool:
        return False

    def learners_ended(self, job_id: str) -> dict[int, LearnerEnd]:
        return {}

    def teardown(self, job_id: str) -> None:
        pass

    def job_ids(self, instance: str) -> set[str]:
        return set(self.deployed)


@dataclass(frozen=True)
class ScaleRun:
    concurrency: int
    start_s: float
    """Submit to every trial of the concurrency started (its decisions stored, its job created)."""
    stored: int
    """START decisions read back from etcd."""
    expected: int
    heap_after_start: int
    heap_after_steps: int
    admitted: int
    """Trial jobs admitted (deployed on the backend that starts nothing)."""
    queued: int


async def _simulated(etcd_server: EtcdServer, concurrency: int, root: str) -> ScaleRun:
    from controller_sidecar.etcdstore import EtcdStore
    from learnerkit.scheduler.config.policy import SubmitPolicy
    from learnerkit.scheduler.core.options import SchedulerOptions
    from learnerkit.scheduler.core.planning import Platform
    from learnerkit.scheduler.core.scheduler import Scheduler
    from learnerkit.scheduler.jobs.store import JobStore
    from learnerkit.scheduler.sweeps.decisions import Action

    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="sidecar"),
        catalog=None,
        resolve_image=lambda manifest: "learner",
        policy=AdmissionPolicy(ready_timeout_s=3600),
        submit_policy=SubmitPolicy(object_stores=(STORE,)),
    )
    etcd = await EtcdStore.connect(etcd_server.settings())
    backend = IdleBackend()
    try:
        service = Scheduler(JobStore(etcd, root), backend, options)  # type: ignore[arg-type]
        await service.loop.rebuild()
        driver = service.loop.driver
        assert driver is not None
        started = time.perf_counter()
        view = await service.submit_sweep("bench", SEARCH.format(trials=TRIALS, concurrency=concurrency), MANIFEST)
        while len(service.shared.jobs) < concurrency:
            await service.loop.guarded_step()
            if time.perf_counter() - started > LIST_LIMIT_S:
                break
        start_s = time.perf_counter() - started
        for _ in range(3):  # the admissions and deploys the start leads to
            await service.loop.guarded_step()
        after_start = tracemalloc.get_traced_memory()[0]
        for _ in range(STEPS):
            await service.loop.guarded_step()
        after_steps = tracemalloc.get_traced_memory()[0]
        decisions = await driver.store.decisions(view.sweep_id)
        starts = sum(1 for d in decisions if d.action is Action.START)
        stages = [t.state.stage for t in service.shared.jobs.values()]
        admitted, queued = stages.count(Stage.DEPLOYED) + stages.count(Stage.RUNNING), stages.count(Stage.QUEUED)
        return ScaleRun(concurrency, start_s, starts, concurrency, after_start, after_steps, admitted, queued)
    finally:
        await etcd.close()


def simulated_scale() -> list[ScaleRun]:
    """The baseline (concurrency 1) then concurrency 200, each on a fresh etcd root of one etcd server."""
    runs: list[ScaleRun] = []
    with tempfile.TemporaryDirectory(prefix="lk-sweep-scale-") as tmp:
        etcd = EtcdServer("/usr/bin/etcd", Path(tmp) / "etcd" / "data")
        etcd.start()
        tracemalloc.start()
        try:
            for concurrency in (1, TRIALS):
                runs.append(asyncio.run(_simulated(etcd, concurrency, f"/lk-scale-{concurrency}/jobs")))
        finally:
            tracemalloc.stop()
            etcd.stop()
    return runs


def simulated_report(runs: list[ScaleRun]) -> list[str]:
    """Prints the figures; returns the targets missed."""
    base, wide = runs
    print(f"a sweep of {TRIALS} trials on a simulated backend (real etcd), concurrency 1 (baseline) and {TRIALS}")
    print(
        f"{'concurrency':>12}{'start s':>9}{'decisions':>11}{'admitted':>10}{'queued':>8}{'heap MiB':>10}"
        f"{f'+{STEPS} steps':>16}"
    )
    for run in runs:
        print(
            f"{run.concurrency:12d}{run.start_s:9.2f}{f'{run.stored}/{run.expected}':>11}{run.admitted:10d}"
            f"{run.queued:8d}{run.heap_after_start / 2**20:10.2f}"
            f"{(run.heap_after_steps - run.heap_after_start) / 2**10:+12.0f} KiB"
        )
    missed = []
    growth = wide.heap_after_steps - wide.heap_after_start
    per_trial = (wide.heap_after_start - base.heap_after_start) / max(1, wide.expected - base.expected)
    print(f"  every decision stored:             {wide.stored}/{wide.expected} START  (target: all)")
    print(f"  heap growth over {STEPS} steps:         {growth / 2**10:+.0f} KiB  (target <= {FLAT_BYTES // 2**10} KiB)")
    print(f"  start time / the baseline's:       {wide.start_s / base.start_s:.1f}x for {wide.expected}x the trials")
    print(f"  heap per started trial:            {per_trial / 2**10:.1f} KiB")
    if wide.stored != wide.expected or base.stored != base.expected:
        missed.append(f"decisions stored: {wide.stored} of {wide.expected}")
    if growth > FLAT_BYTES:
        missed.append(f"the heap grew {growth / 2**20:.1f} MiB over {STEPS} steps (target <= 1 MiB)")
    return missed


@dataclass(frozen=True)
class LocalRun:
    accepted_s: float
    """Submit to the sweep's id (the REST answer)."""
    listed_s: float
    """Submit to `sweep status` listing every trial (0 when it did not within `LIST_LIMIT_S`)."""
    listed: int
    queued: int
    admitted: int
    """Trials whose job was admitted (neither queued nor ended) once every trial had its job."""
    capacity: int
    """Trials the engine's CPUs and memory hold at once: what admission may admit."""
    containers: int
    """Containers of the sweep the engine ran (each admitted trial's learner and sidecar)."""
    most_running: int
    """The most containers of the sweep seen running at once."""
    left: int
    """Containers of the sweep still there after the cleanup (removed by the bench)."""
    cancel_s: float
    """`sweep cancel` until every trial job ended (or `LIST_LIMIT_S`)."""
    cancel_call_s: float
    """The `sweep cancel` call itself: it records the cancel and returns; the loop removes the pairs."""
    slowest_answer_s: float
    """The slowest `job list` answer while the pairs were being removed."""
    cancel_error: str


def local_default_scale(sidecar_image: str) -> LocalRun:
    """`learnerkit scheduler serve` on the container engine; the sweep cancelled and cleaned up once listed."""
    from scheduler import serve
    from serving import once_served

    from learnerkit.common import engine
    from learnerkit.dev.s3 import SeaweedServer
    from learnerkit.pair.docker import JOB_LABEL
    from learnerkit.scheduler.api.auth import add_token
    from learnerkit.scheduler.client.http import SchedulerClient

    accepted_s = listed_s = cancel_s = cancel_call_s = slowest_answer_s = 0.0
    cancel_error = ""
    listed = queued = admitted = most_running = 0
    statuses: list[str] = []
    sweep_id = ""
    seen: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="lk-sweep-scale-local-") as tmp:
        etcd, s3 = EtcdServer("/usr/bin/etcd", Path(tmp) / "etcd" / "data"), SeaweedServer(Path(tmp) / "s3")
        tokens = Path(tmp) / "tokens.json"
        token = add_token(tokens, "bench")
        etcd.start()
        s3.start()
        child = None
        try:
            for bucket in ("data", "results"):
                s3.client().create_bucket(Bucket=bucket)
            child, url = serve(etcd, s3, sidecar_image, tokens)
            client = SchedulerClient(url, token, timeout_s=120)
            once_served(client.list_sweeps, child, 120)
            account = f'auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"'
            manifest = MANIFEST.replace(f'auth_url: "{STORE}", user_name: a, password: b', account)
            # Half the engine's CPUs a trial: at most 2 are admitted, the others queue (and no host is loaded).
            info = engine.engine().info()
            half = max(1, int(info["NCPU"]) // 2)
            manifest = manifest.replace("cpus: 1\n", f"cpus: {half}\n")
            capacity = min(int(info["NCPU"]) // half, int(info["MemTotal"]) // 2**30)
            started = time.monotonic()
            view = client.submit_sweep(SEARCH.format(trials=TRIALS, concurrency=TRIALS), manifest)
            accepted_s, sweep_id = time.monotonic() - started, view.sweep_id
            # Listed: every trial in `sweep status`; then every trial with its job, and the engine filled (as many
            # admitted as it holds; a few admission passes), so that the bound on admission is what is checked.
            while time.monotonic() - started < LIST_LIMIT_S:
                view = client.get_sweep(sweep_id)
                most_running = max(most_running, _sample(JOB_LABEL, sweep_id, seen))
                if len(view.trials) == TRIALS and not listed_s:
                    listed_s = time.monotonic() - started
                statuses = [t.job_status for t in view.trials]
                admitted = sum(1 for status in statuses if status not in ("", "QUEUED") and not _ended(status))
                if listed_s and all(statuses) and admitted >= capacity:
                    break
                time.sleep(0.5)
            listed, queued = len(statuses), statuses.count("QUEUED")
            print(f"  (accepted in {accepted_s:.2f} s, {listed} listed, {queued} queued, {admitted} admitted)")
            cancel_started = time.monotonic()
            try:
                client.sweep_verb(sweep_id, "cancel")
            except LearnerkitError as e:
                cancel_error = str(e)
            cancel_call_s = time.monotonic() - cancel_started
            deadline = time.monotonic() + LIST_LIMIT_S
            while time.monotonic() < deadline:
                most_running = max(most_running, _sample(JOB_LABEL, sweep_id, seen))
                try:
                    asked = time.monotonic()
                    jobs = client.list_jobs()
                    slowest_answer_s = max(slowest_answer_s, time.monotonic() - asked)
                    if all(_ended(j.status) for j in jobs) and not _sample(JOB_LABEL, sweep_id, seen):
                        break
                except LearnerkitError as e:  # the scheduler unanswering: asked again
                    cancel_error = cancel_error or str(e)
                time.sleep(1.0)
            cancel_s = time.monotonic() - cancel_started
        finally:
            try:
                if child is not None:
                    child.terminate()
                    try:
                        child.wait(120)
                    except subprocess.TimeoutExpired:
                        child.kill()
                        child.wait(30)
                left = _remove_leftovers(JOB_LABEL, sweep_id) if sweep_id else 0
            finally:
                etcd.stop()
                s3.stop()
    return LocalRun(
        accepted_s,
        listed_s,
        listed,
        queued,
        admitted,
        capacity,
        len(seen),
        most_running,
        left,
        cancel_s,
        cancel_call_s,
        slowest_answer_s,
        cancel_error,
    )


def _ended(status: str) -> bool:
    return status in ("COMPLETED", "FAILED", "HALTED", "CANCELLED")


def _remove_leftovers(label: str, sweep_id: str) -> int:
    """Remove what the engine still holds of the sweep's trial jobs (containers, volumes, networks); how many
    containers there were."""
    from learnerkit.common import engine

    client = engine.engine()
    mine = [
        c for c in client.containers.list(all=True, filters={"label": label}) if c.labels[label].startswith(sweep_id)
    ]
    for container in mine:
        container.remove(force=True)
    for volume in client.volumes.list(filters={"label": label}):
        if (volume.attrs.get("Labels") or {}).get(label, "").startswith(sweep_id):
            volume.remove(force=True)
    for network in client.networks.list(filters={"label": label}):
        if (network.attrs.get("Labels") or {}).get(label, "").startswith(sweep_id):
            network.remove()
    return len(mine)


def _sample(label: str, sweep_id: str, seen: set[str]) -> int:
    """Adds the ids of the engine's containers (running or not) of the sweep's trial jobs to `seen`; how many of
    them run now."""
    from learnerkit.common import engine

    found = engine.engine().containers.list(all=True, filters={"label": label}, ignore_removed=True)
    mine = [c for c in found if c.labels.get(label, "").startswith(sweep_id)]
    seen |= {c.id for c in mine}
    return sum(1 for c in mine if c.status == "running")


def local_report(run: LocalRun) -> list[str]:
    """Prints the figures; returns the targets missed."""
    print(f"the local default (`scheduler serve`, the container engine): {TRIALS} trials at concurrency {TRIALS}")
    listed = f"{run.listed_s:.1f} s" if run.listed_s else f"not within {LIST_LIMIT_S:.0f} s"
    print(f"  accepted in {run.accepted_s:.2f} s; {run.listed} trials listed, {run.queued} queued: {listed}")
    print(f"  listed / the 2-minute target: {run.listed_s / LIST_LIMIT_S:.3f}" if run.listed_s else "  MISSED")
    print(f"  admitted {run.admitted} (the engine's CPUs and memory hold {run.capacity}); {run.queued} queued")
    print(f"  containers of the sweep: {run.containers} ran, at most {run.most_running} at once (a trial: 2)")
    print(f"  containers left after the cancel (removed by the bench): {run.left}")
    missed = []
    if not run.listed_s or run.listed != TRIALS:
        missed.append(f"the sweep listed {run.listed} of {TRIALS} trials in {LIST_LIMIT_S:.0f} s")
    if run.queued < TRIALS // 2:
        missed.append(f"only {run.queued} of {TRIALS} trials queued once every trial had its job")
    if run.admitted > run.capacity or run.most_running > 2 * run.capacity:
        missed.append(f"{run.admitted} admitted, {run.most_running} containers at once: over {run.capacity} trials")
    print(f"  sweep cancel: the call {run.cancel_call_s:.2f} s; every trial job ended and its")
    print(f"  pair removed {run.cancel_s:.1f} s after; the slowest API answer meanwhile {run.slowest_answer_s:.2f} s")
    if run.cancel_error:
        missed.append(f"sweep cancel of {TRIALS} trials: {run.cancel_error}")
    if run.left:
        missed.append(f"{run.left} containers of the sweep were left after its cancel")
    return missed
