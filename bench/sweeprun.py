"""The real-learner half of bench/sweeps.py: sweeps of a deterministic learner in learner containers with the
real sidecar, under `learnerkit scheduler serve` (a child process) with etcd and SeaweedFS of their own.

The learner's loss at a step follows from its parameters by the simulated learner's formula
(`sweepcurves.LOSS_FORMULA`), and each step sleeps `STEP_S` to stand for compute. It reads its budget with
`learner.budget()`, resumes from its newest checkpoint, and checkpoints at its budget.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from docker.errors import NotFound
from proccost import ContainerSampler, EngineMeter, ProcessMeter
from scheduler import serve
from serving import once_served
from sweepcurves import LOSS_FORMULA

from learnerkit.common import engine
from learnerkit.dev.etcd import EtcdServer
from learnerkit.dev.s3 import SeaweedServer
from learnerkit.pair.docker import JOB_LABEL, ROLE_LABEL
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.facade import SweepView
from learnerkit_build.builds.images import build_image
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs

REPO = Path(__file__).resolve().parents[1]
TENANT = "bench"
STEP_S = 0.05


def train_script(step_s: float) -> str:
    """The learner: each step sleeps ``step_s`` to stand for compute."""
    return (
        """\
import json, math, time
import learner

"""
        + LOSS_FORMULA
        + f"""
config = learner.parameters()
limit = learner.budget()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
while not limit.reached(step):
    time.sleep({step_s})
    step += 1
    learner.log_metrics(step, val_loss=synthetic_loss(config, step))
with learner.new_checkpoint(step) as path:
    (path / "state.json").write_text(json.dumps({{"step": step}}))
"""
    )


SPACE = """\
parameters:
  lr: {type: log_uniform, min: 1.0e-4, max: 0.1}
  width: {type: choice, values: [16, 32, 64]}
  dropout: {type: uniform, min: 0.0, max: 0.5}
  layers: {type: integer, min: 1, max: 4}
objective: {metric: val_loss, goal: minimize}
"""


@dataclass(frozen=True)
class RealRun:
    label: str
    view: SweepView
    wall_s: float
    steps: int
    """Steps the learners trained, read from their metric histories."""
    recomputed: int
    """Steps a trial's histories hold more than once."""
    attempts: int
    """Trial starts and promotions: each a deploy of a learner pair, but for a promotion in place."""
    sidecar_cpu_s: float
    scheduler_cpu_s: float
    engine_cpu_s: float
    learner_cpu_s: float
    """The learner containers' CPU-seconds: training, and the interpreter's and framework's start each attempt."""
    trained_s: float
    """The training's own seconds, as the learners logged them (0 without ``seconds_metric``)."""
    pairs: tuple[int, ...]
    """Per trial, by index: the learner pairs deployed for it (its job's attempts), each a learner started."""

    @property
    def deploys(self) -> int:
        """Learner pairs deployed: ``attempts - deploys`` promotions went on in place."""
        return sum(self.pairs)

    @property
    def best(self) -> float:
        return min(t.results[-1] for t in self.view.trials if len(t.results) == len(self.view.rungs))


def manifest(s3: SeaweedServer) -> str:
    return f"""\
name: sweep-bench
cpus: 0.2
memory: 256Mb
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
  command: "python3 train.py"
"""


def search(algorithm: str, trials: int, concurrency: int, seed: int, rungs: tuple[int, int]) -> str:
    eta = ", eta: 3" if algorithm == "asha" else ""
    low = rungs[0] if algorithm == "asha" else rungs[1]
    return (
        f"manifest: manifest.yml\n{SPACE}budget: {{unit: step, min: {low}, max: {rungs[1]}}}\n"
        f"algorithm: {{name: {algorithm}{eta}}}\ntrials: {trials}\nconcurrency: {concurrency}\nseed: {seed}\n"
    )


class SidecarWatch:
    """Hands every container of the sweep in ``role`` (sidecar, learner) to the sampler as it appears."""

    def __init__(self, sampler: ContainerSampler, prefix: str, role: str = "sidecar") -> None:
        self.sampler, self.prefix, self.role, self.seen = sampler, prefix, role, set[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        client = engine.engine()
        while not self._stop.wait(0.1):
            try:
                found = client.containers.list(filters={"label": f"{ROLE_LABEL}={self.role}"})
            except NotFound:  # one ended between the engine's list and its inspect: look again
                continue
            for container in found:
                job = container.labels.get(JOB_LABEL, "")
                if job.startswith(self.prefix) and container.id not in self.seen:
                    self.seen.add(container.id)
                    self.sampler.watch(container.id)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def history(client: SchedulerClient, job_id: str) -> list[dict[str, float]]:
    """The objective's records: each step's logged values, the step under "step"."""
    return [
        {"step": float(r["step"]), **r["values"]}
        for r in client.metrics_history(job_id)
        if "val_loss" in r.get("values", {})
    ]


def run_sweep(lab: Cluster, text: str, label: str, model: Path, seconds_metric: str = "") -> RealRun:
    """Submit one sweep of ``model`` (a zip) with the manifest in ``lab.root`` and measure it until done."""
    (lab.root / "search.yml").write_text(text)
    sidecars, learners = ContainerSampler(), ContainerSampler()
    engine_meter, scheduler_meter = EngineMeter(idle_s=3.0), ProcessMeter(lab.pid)
    started = time.monotonic()
    view = lab.client.submit_sweep(text, (lab.root / "manifest.yml").read_text(), image=lab.image, model=model)
    watches = [SidecarWatch(sidecars, view.sweep_id), SidecarWatch(learners, view.sweep_id, "learner")]
    try:
        while view.status != "done":
            time.sleep(0.5)
            view = lab.client.get_sweep(view.sweep_id)
        wall = time.monotonic() - started
        sidecars.settle(30)
        learners.settle(30)
    finally:
        for watch in watches:
            watch.close()
        sidecars.close()
        learners.close()
    engine_spent, engine_idle = engine_meter.spent()
    steps = recomputed = 0
    trained_s = 0.0
    pairs = tuple(len(lab.client.get(trial.job_id).attempts) for trial in view.trials)
    for trial in view.trials:
        records = history(lab.client, trial.job_id)
        seen = [r["step"] for r in records]
        steps += len(seen)
        recomputed += len(seen) - len(set(seen))
        trained_s += sum(r.get(seconds_metric, 0.0) for r in records)
    # A trial's start, then a promotion for each rung it finished before its last.
    attempts = len(view.trials) + sum(len(t.results) - 1 for t in view.trials if t.results)
    sidecar_cpu = sum(cost.cpu_s for cost in sidecars.costs.values())
    return RealRun(
        label,
        view,
        wall,
        steps,
        recomputed,
        attempts,
        sidecar_cpu,
        scheduler_meter.cpu_s(),
        max(0.0, engine_spent - engine_idle),
        sum(cost.cpu_s for cost in learners.costs.values()),
        trained_s,
        pairs,
    )


@dataclass(frozen=True)
class Cluster:
    """A scheduler serving the bench tenant, with etcd and SeaweedFS of its own."""

    client: SchedulerClient
    s3: SeaweedServer
    root: Path
    image: str
    pid: int


@contextmanager
def cluster() -> Iterator[Cluster]:
    """Build (or find) the PyTorch CPU learner and sidecar images and serve a scheduler until the block ends."""
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs  # as `learnerkit image build`: the host's pip
    sidecar = build_sidecar(REPO, inputs, lambda _: None)
    [spec] = [i for i in load_matrix(REPO).images if i.framework.name == "pytorch" and i.variant.accelerator == "cpu"]
    built = build_image(REPO, spec, inputs, lambda _: None)
    image = built.immutable_reference or built.reference
    with tempfile.TemporaryDirectory(prefix="lk-sweep-bench-") as tmp:
        root = Path(tmp)
        etcd, s3 = EtcdServer("/usr/bin/etcd", root / "etcd" / "data"), SeaweedServer(root / "s3")
        tokens = root / "tokens.json"
        token = add_token(tokens, TENANT)
        etcd.start()
        s3.start()
        child = None
        try:
            objects = s3.client()
            for bucket in ("bench-data", "bench-results"):
                objects.create_bucket(Bucket=bucket)
            os.environ["LEARNERKIT_IMAGE_ALLOWLIST"] = image  # this tree's image by its content tag, untested here
            child, url = serve(etcd, s3, sidecar.immutable_reference or sidecar.reference, tokens)
            client = SchedulerClient(url, token, timeout_s=120)
            once_served(client.list_sweeps, child, 120)
            yield Cluster(client, s3, root, image, child.pid)
        finally:
            if child is not None:
                child.terminate()
                child.wait(60)
            etcd.stop()
            s3.stop()


def real_comparison(
    trials: int, concurrency: int, seed: int, rungs: tuple[int, int], step_s: float = STEP_S
) -> list[RealRun]:
    runs: list[RealRun] = []
    with cluster() as lab:
        lab.s3.client().put_object(Bucket="bench-data", Key="empty", Body=b"")
        (lab.root / "manifest.yml").write_text(manifest(lab.s3))
        with zipfile.ZipFile(lab.root / "model.zip", "w") as out:
            out.writestr("train.py", train_script(step_s))
        for algorithm in ("asha", "random"):
            text = search(algorithm, trials, concurrency, seed, rungs)
            runs.append(run_sweep(lab, text, algorithm, lab.root / "model.zip"))
    return runs


def report(runs: list[RealRun], step_s: float = STEP_S) -> None:
    asha, full = runs
    print(f"real learners: {len(asha.view.trials)} trials, rungs {asha.view.rungs}, {step_s:g} s a step")
    print(
        f"{'':10}{'best':>9}{'steps':>7}{'recomputed':>11}{'attempts':>9}{'wall s':>8}"
        f"{'sidecar':>9}{'scheduler':>10}{'engine':>8}  (CPU-s)"
    )
    for run in runs:
        print(
            f"{run.label:10}{run.best:9.5f}{run.steps:7d}{run.recomputed:11d}{run.attempts:9d}{run.wall_s:8.1f}"
            f"{run.sidecar_cpu_s:9.2f}{run.scheduler_cpu_s:10.2f}{run.engine_cpu_s:8.2f}"
        )
    print(f"  ASHA's best / random's best:              {asha.best / full.best:.4f}  (target <= 1.01)")
    print(f"  ASHA's learner-steps / random's:          {asha.steps / full.steps:.3f}   (target <= 0.35)")
    print(f"  ASHA's wall time / random's:              {asha.wall_s / full.wall_s:.3f}")
    for run in runs:
        per = (run.sidecar_cpu_s + run.scheduler_cpu_s + run.engine_cpu_s) / run.attempts
        print(
            f"  {run.label}: platform CPU-s per trial start or promotion: {per:.2f} "
            f"(sidecar {run.sidecar_cpu_s / run.attempts:.2f}, scheduler {run.scheduler_cpu_s / run.attempts:.2f},"
            f" engine {run.engine_cpu_s / run.attempts:.2f}); learner-seconds of steps: {run.steps * step_s:.1f}"
        )
