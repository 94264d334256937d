"""The real training problem of bench/sweeps.py (`--digits`): a small PyTorch network on scikit-learn's
handwritten digits, trials in the PyTorch CPU learner image with the real sidecar under `learnerkit scheduler
serve`, the same sampled configurations for every algorithm:

- ASHA, its learner promoting in place where the scheduler promotes it at its rung's end (`learner.next_budget`,
  docs/learner-contract.md) and from its checkpoint by a new deploy otherwise; successive halving restarting
  promoted configurations from scratch (the same search file, a learner that ends every rung and ignores the
  checkpoint it is given: Katib's Hyperband behaviour); and random search with full training (no rungs);
- best validation loss, epochs trained and recomputed (from the metric histories), the training's CPU-seconds
  (each epoch's, as the learner logs them), the learner containers' CPU-seconds, wall time, and the platform's
  CPU-seconds (sidecars, scheduler, engine) per trial start or promotion; the learner pairs deployed (each trial
  job's attempts), so the promotions in place and by a new deploy as the run took them.

The digits are written to CSV inside the robustness evaluator image (it has scikit-learn; this venv has not)
and uploaded to the dev object store. Training is deterministic (one thread, a seed per epoch), so a trial
resumed from its checkpoint and one retrained from scratch reach the same results and take the same decisions.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

from sweeprun import REPO, Cluster, RealRun, cluster, run_sweep

from learnerkit.dev.s3 import SeaweedServer
from learnerkit_build.builds.images import build_image
from learnerkit_build.imagetest.containers import LearnerRun, make_job_folder, output_of
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs

BUCKET = "bench-digits"
SECONDS_METRIC = "epoch_cpu_s"
WRITE_DIGITS = (REPO / "examples" / "digits-evaluated" / "write_digits.py").read_text()

TRAIN = """\
import csv, time
import torch
import learner

FROM_SCRATCH = {from_scratch}
IN_PLACE = {in_place}
torch.set_num_threads(1)


def load(name):
    with (learner.data_dir() / name).open(newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    return torch.tensor([[float(v) for v in row[:-1]] for row in rows]), torch.tensor([int(row[-1]) for row in rows])


config = learner.parameters()
limit = learner.budget()
x, y = load("digits-train.csv")
vx, vy = load("digits-eval.csv")
torch.manual_seed(0)
layers, width = [], 64
for _ in range(int(config["layers"])):
    layers += [torch.nn.Linear(width, int(config["width"])), torch.nn.ReLU()]
    layers.append(torch.nn.Dropout(float(config["dropout"])))
    width = int(config["width"])
net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
optimizer = torch.optim.SGD(net.parameters(), lr=float(config["lr"]), momentum=0.9)
ckpt = None if FROM_SCRATCH else learner.latest_checkpoint()
epoch = 0
if ckpt:
    state = torch.load(ckpt.path / "state.pt")
    net.load_state_dict(state["net"])
    optimizer.load_state_dict(state["optimizer"])
    epoch = ckpt.step
while not limit.reached(epoch):
    started = time.process_time()
    torch.manual_seed(1000 + epoch)
    net.train()
    for _ in range({passes}):
        order = torch.randperm(len(x))
        for start in range(0, len(x), 32):
            batch = order[start : start + 32]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
            optimizer.step()
    net.eval()
    with torch.no_grad():
        out = net(vx)
        val_loss = torch.nn.functional.cross_entropy(out, vy).item()
        val_error = (out.argmax(1) != vy).float().mean().item()
    epoch += 1
    learner.log_metrics(epoch, val_loss=val_loss, val_error=val_error, epoch_cpu_s=time.process_time() - started)
    if IN_PLACE and limit.reached(epoch):
        limit = learner.next_budget(epoch) or limit  # promoted there and then: train on in this process
with learner.new_checkpoint(epoch) as path:
    torch.save({{"net": net.state_dict(), "optimizer": optimizer.state_dict()}}, path / "state.pt")
"""

WIDTHS = (16, 32, 64)
SPACE = """\
parameters:
  lr: {{type: log_uniform, min: 1.0e-3, max: 0.5}}
  width: {{type: choice, values: [{widths}]}}
  dropout: {{type: uniform, min: 0.0, max: 0.3}}
  layers: {{type: integer, min: 1, max: 2}}
objective: {{metric: val_loss, goal: minimize}}
"""


def manifest(s3: SeaweedServer) -> str:
    return f"""\
name: sweep-digits
cpus: 0.4
memory: 1Gb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {BUCKET}}}
    training_results: {{container: bench-results}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: "python3 train.py"
"""


def search(
    algorithm: str, trials: int, concurrency: int, seed: int, rungs: tuple[int, int], widths: tuple[int, ...] = WIDTHS
) -> str:
    eta = ", eta: 3" if algorithm == "asha" else ""
    low = rungs[0] if algorithm == "asha" else rungs[1]
    space = SPACE.format(widths=", ".join(map(str, widths)))
    return (
        f"manifest: manifest.yml\n{space}budget: {{unit: epoch, min: {low}, max: {rungs[1]}}}\n"
        f"algorithm: {{name: {algorithm}{eta}}}\ntrials: {trials}\nconcurrency: {concurrency}\nseed: {seed}\n"
    )


def upload_digits(lab: Cluster) -> None:
    """Write the digits CSVs in the robustness image (a hardened container without network) and upload them."""
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    [spec] = load_matrix(REPO).select(["robustness:1.20-cpu"])
    built = build_image(REPO, spec, inputs, lambda _: None)
    with tempfile.TemporaryDirectory(prefix="lk-digits-") as tmp:
        job = make_job_folder(Path(tmp) / "data")
        (job / "control" / "start").write_text("")  # learner-run starts the command once it is there
        status, logs = output_of(
            LearnerRun(built.image_id or built.reference, job, ["python", "-c", WRITE_DIGITS]), 600
        )
        if status != 0:
            raise RuntimeError(f"writing the digits failed ({status}): {logs[-2000:]}")
        objects = lab.s3.client()
        objects.create_bucket(Bucket=BUCKET)
        for name in ("digits-train.csv", "digits-eval.csv"):
            objects.upload_file(str(job / "data" / name), BUCKET, name)


def model(folder: Path, label: str, *, from_scratch: bool, in_place: bool, passes: int = 1) -> Path:
    archive = folder / f"model-{label}.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("train.py", TRAIN.format(from_scratch=from_scratch, in_place=in_place, passes=passes))
    return archive


def digits_comparison(
    trials: int,
    concurrency: int,
    seed: int,
    rungs: tuple[int, int],
    widths: tuple[int, ...] = WIDTHS,
    passes: int = 1,
) -> list[RealRun]:
    """ASHA (promotion in place where it can), random search with full training, successive halving from scratch;
    each run's row printed as it ends. `passes`: passes over the training set in one epoch (heavier epochs)."""
    print(
        f"digits (1300 train, 497 validation; PyTorch MLP, SGD, batch 32, one thread): {trials} trials, ASHA rungs"
        f" {rungs[0]}..{rungs[1]} epochs (eta 3), random search {rungs[1]} epochs, {concurrency} at once, seed {seed},"
        f" widths {', '.join(map(str, widths))}, {passes} pass(es) over the training set an epoch"
    )
    print(
        f"{'':11}{'best':>8}{'epochs':>7}{'recomp':>7}{'train CPU-s':>12}{'learner CPU-s':>14}{'start+prom':>11}"
        f"{'deploys':>8}{'wall s':>8}{'sidecar':>9}{'scheduler':>10}{'engine':>8}  (platform CPU-s)",
        flush=True,
    )
    runs: list[RealRun] = []
    with cluster() as lab:
        upload_digits(lab)
        (lab.root / "manifest.yml").write_text(manifest(lab.s3))
        for label, algorithm, scratch, in_place in (
            ("asha", "asha", False, True),
            ("random", "random", False, False),  # one rung: nothing to promote
            ("sh-scratch", "asha", True, False),  # every promotion a new deploy that retrains from epoch 0
        ):
            text = search(algorithm, trials, concurrency, seed, rungs, widths)
            trial_model = model(lab.root, label, from_scratch=scratch, in_place=in_place, passes=passes)
            run = run_sweep(lab, text, label, trial_model, SECONDS_METRIC)
            print(
                f"{run.label:11}{run.best:8.5f}{run.steps:7d}{run.recomputed:7d}{run.trained_s:12.2f}"
                f"{run.learner_cpu_s:14.1f}{run.attempts:11d}{run.deploys:8d}{run.wall_s:8.1f}"
                f"{run.sidecar_cpu_s:9.2f}{run.scheduler_cpu_s:10.2f}{run.engine_cpu_s:8.2f}",
                flush=True,
            )
            runs.append(run)
    return runs


def digits_report(runs: list[RealRun]) -> list[str]:
    """Print the ratios against their targets; returns the targets missed."""
    asha, full, scratch = runs
    print(f"  ASHA's rungs: {asha.view.rungs}; its best trial's parameters: {best_parameters(asha)}")
    in_place = asha.attempts - asha.deploys
    print(
        f"  ASHA's promotions: {asha.attempts - len(asha.pairs)}, in place {in_place}, by a new deploy"
        f" {asha.deploys - len(asha.pairs)} (learner pairs per trial: {' '.join(map(str, asha.pairs))})"
    )
    ratios: tuple[tuple[str, float, float | None, str], ...] = (
        ("ASHA's best / random's best", asha.best / full.best, 1.01, ""),
        ("ASHA's training CPU-s / random's", asha.trained_s / full.trained_s, 0.35, ""),
        ("ASHA's epochs / random's", asha.steps / full.steps, None, ""),
        ("ASHA's learner-container CPU-s / random's", asha.learner_cpu_s / full.learner_cpu_s, None, ""),
        ("ASHA's wall time / random's", asha.wall_s / full.wall_s, 0.6, ", issue 41"),
        ("ASHA's training CPU-s / from scratch's", asha.trained_s / scratch.trained_s, 0.8, ""),
        ("ASHA's epochs / from scratch's", asha.steps / scratch.steps, None, ""),
        ("ASHA's learner-container CPU-s / from scratch's", asha.learner_cpu_s / scratch.learner_cpu_s, None, ""),
        ("ASHA's wall time / from scratch's", asha.wall_s / scratch.wall_s, None, ""),
    )
    missed = []
    for label, ratio, target, note in ratios:
        verdict = ""
        if target is not None:
            verdict = f"(target <= {target:g}{note}) {'MET' if ratio <= target else 'MISSED'}"
            if ratio > target:
                missed.append(f"digits: {label} {ratio:.4f} (target <= {target:g})")
        print(f"  {label + ':':50s}{ratio:7.4f}  {verdict}")
    for run in runs:
        per = (run.sidecar_cpu_s + run.scheduler_cpu_s + run.engine_cpu_s) / run.attempts
        print(
            f"  {run.label}: platform CPU-s per trial start or promotion: {per:.2f} "
            f"(sidecar {run.sidecar_cpu_s / run.attempts:.2f}, scheduler {run.scheduler_cpu_s / run.attempts:.2f},"
            f" engine {run.engine_cpu_s / run.attempts:.2f})"
        )
    return missed


def best_parameters(run: RealRun) -> dict[str, float | int | str | bool]:
    finished = [t for t in run.view.trials if len(t.results) == len(run.view.rungs)]
    return min(finished, key=lambda t: t.results[-1]).parameters
