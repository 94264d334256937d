"""The arrival-order case of bench/sweeps.py in containers (`--arrival`): the best configuration enters its first
rung third, behind two better-looking ones, and this ASHA (promotion on checkpoints) finds it.

A synthetic learner in the PyTorch CPU learner image with the real sidecar, under `learnerkit scheduler serve`:
9 trials of one parameter `x`, rungs 1 and 3 steps, eta 3, 3 at once. The bench samples the configurations as the
scheduler will (the same search file and seed) and gives trial i its loss after step 1 and after step 3 and its
seconds a step: trials 0 and 1 look best at step 1, trial 2 looks third there and is the best at step 3, and
trains slower, so it reports its first rung after them. The stop-only rule is not offered in search files
(docs/sweeps.md): it is run by the decision core on the trials' first-rung durations measured in the containers.
"""

from __future__ import annotations

import zipfile
from datetime import datetime
from pathlib import Path

from sweeprun import cluster, manifest, run_sweep

from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.sweeps.rungbook import Plan
from learnerkit.scheduler.sweeps.sampling import trial_configs
from learnerkit.scheduler.sweeps.searchfile import parse_search_file
from learnerkit.scheduler.sweeps.simulate import simulate
from learnerkit.scheduler.sweeps.spec import AlgorithmName

FIRST = (0.10, 0.20, 0.30, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9)
"""Each trial's loss after step 1."""
FINAL = (0.5, 0.6, 0.01, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9)
"""After steps 2 and 3."""
STEP_S = (1.0, 1.0, 12.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
SEARCH = """\
manifest: manifest.yml
parameters:
  x: {type: uniform, min: 0.0, max: 1.0}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 1, max: 3}
algorithm: {name: asha, eta: 3}
trials: 9
concurrency: 3
seed: 7
"""
TRAIN = """\
import json, time
import learner

TABLE = {table}
first, final, step_s = TABLE[repr(float(learner.parameters()["x"]))]
limit = learner.budget()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
while not limit.reached(step):
    time.sleep(step_s)
    step += 1
    learner.log_metrics(step, val_loss=first if step == 1 else final)
with learner.new_checkpoint(step) as path:
    (path / "state.json").write_text(json.dumps({{"step": step}}))
"""


def learner_table() -> dict[str, tuple[float, float, float]]:
    """Trial i's (loss at step 1, loss after, seconds a step), by its sampled x as the learner reads it."""
    spec = parse_search_file(SEARCH, Path("search.yml"))
    configs = trial_configs(spec.space, seed=spec.seed, trials=spec.trials, grid=False)
    table = {}
    for i, config in enumerate(configs):
        x = config["x"]
        assert isinstance(x, float), config
        table[repr(x)] = (FIRST[i], FINAL[i], STEP_S[i])
    return table


def first_rung_seconds(client: SchedulerClient, job_id: str) -> float:
    """How long the trial's first attempt (its first rung) ran, from start to end, as the scheduler recorded it."""
    first = client.get(job_id).attempts[0]
    assert first.ended_at is not None, job_id
    return (datetime.fromisoformat(first.ended_at) - datetime.fromisoformat(first.started_at)).total_seconds()


def arrival_in_containers() -> None:
    with cluster() as lab:
        lab.s3.client().put_object(Bucket="bench-data", Key="empty", Body=b"")
        (lab.root / "manifest.yml").write_text(manifest(lab.s3))
        archive = lab.root / "arrival.zip"
        with zipfile.ZipFile(archive, "w") as out:
            out.writestr("train.py", TRAIN.format(table=repr(learner_table())))
        run = run_sweep(lab, SEARCH, "asha", archive)
        seconds = {t.index: first_rung_seconds(lab.client, t.job_id) for t in run.view.trials}
    order = sorted(seconds, key=lambda i: (seconds[i], i))
    finished = [t for t in run.view.trials if len(t.results) == len(run.view.rungs)]
    best = min(finished, key=lambda t: t.results[-1])
    print("arrival order in containers: 9 trials, rungs (1, 3) steps, eta 3, 3 at once, seed 7")
    print(
        f"  first rung's seconds (start to end of each trial's first attempt): {[round(seconds[i], 1) for i in order]}"
    )
    print(f"  trials by first-rung time: {order}")
    verdict = "found" if best.index == 2 else "lost"
    print(
        f"  ASHA, promotion on checkpoints (in containers): best trial {best.index} ({best.results[-1]:.2f}): {verdict}"
    )
    objective = parse_search_file(SEARCH, Path("search.yml")).objective
    plan = Plan(AlgorithmName.ASHA, objective, (1, 3), 9, 3, eta=3, stop_only=True)
    sim = simulate(
        plan, lambda trial, budget: FIRST[trial] if budget == 1 else FINAL[trial], seconds_per_unit=seconds.__getitem__
    )
    value, index = min(sim.book.ranked[-1])
    verdict = "found" if index == 2 else "lost"
    print(f"  stop-only rule (decision core, those measured times): best trial {index} ({value:.2f}): {verdict}")
