"""A small sweep end to end on the Docker backend: real etcd, SeaweedFS, learner pairs and sidecars.

Four trials of a deterministic learner (its model code), promotion-based ASHA with eta 2 over the budgets
2, 4 and 8 steps, two at once. Each trial stops at its rung's budget by itself (`learner.budget()`), is
paused on its checkpoint, and a promoted one resumes from it; the scheduler is killed once the first trial
has paused and a new one finishes the sweep from etcd alone. A trial that only honours halts stops at each
rung's step too (the `learner` helper halts it there); one that ignores both is halted by the driver.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import SweepView
from learnerkit.scheduler.sweeps.best import best_trial
from learnerkit.scheduler.sweeps.decisions import Action
from tests.integration.scheduler.conftest import RESULTS_BUCKET, Harness, chunks, leftovers, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

QUALITY = {"0.1": 0.5, "0.2": 0.1, "0.3": 0.3, "0.4": 0.7}
"""The loss each learning rate tends to: 0.2 is the best at every step."""

TRAIN = """\
import json, os, sys
import learner

lr = os.environ["lr"]
assert sys.argv[1:] == ["--lr", lr], sys.argv  # ${lr} in the command is the trial's parameter
with open(os.path.join(os.environ["JOB_STATE_DIR"], "parameters.json")) as f:
    assert json.load(f) == {"lr": lr} == learner.parameters()  # the file learner-run wrote, and the variable
quality = {"0.1": 0.5, "0.2": 0.1, "0.3": 0.3, "0.4": 0.7}[lr]
limit = learner.budget()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
while not limit.reached(step):
    step += 1
    learner.log_metrics(step, val_loss=quality + 1.0 / step)
with learner.new_checkpoint(step) as path:
    (path / "state.json").write_text(json.dumps({"step": step, "lr": lr}))
"""

SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: ["0.1", "0.2", "0.3", "0.4"]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 2, max: 8}
algorithm: {name: asha, eta: 2}
trials: 4
concurrency: 2
seed: 3
"""


def model_zip(tmp_path: Path) -> Path:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("train.py", TRAIN)
    return archive


def objects(client: Any, prefix: str) -> list[tuple[str, int]]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=RESULTS_BUCKET, Prefix=prefix)
    return [(item["Key"], int(item["Size"])) for page in pages for item in page.get("Contents", [])]


def history_steps(client: Any, job_id: str) -> list[int]:
    """Every step of the trial's metric history, across its attempts (one per rung it trained)."""
    steps: list[int] = []
    for key, _ in objects(client, f"{job_id}/"):
        if key.endswith("/logs/metrics.jsonl"):
            body = client.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read().decode()
            steps += [json.loads(line)["step"] for line in body.splitlines() if line.strip()]
    return steps


def test_a_sweep_pauses_promotes_from_checkpoints_and_survives_a_restart(
    etcd_server: Any,
    service_options: SchedulerOptions,
    s3_server: Any,
    scheduler_buckets: Any,
    learner_image: str,
    tmp_path: Path,
) -> None:
    text = manifest(s3_server, "python3 train.py --lr ${lr}")
    first = Harness(etcd_server, service_options)
    try:
        view = first.call(
            first.service.submit_sweep("team-a", SEARCH, text, image=learner_image, model=chunks(model_zip(tmp_path)))
        )
        sweep_id = view.sweep_id

        def paused() -> bool:
            sweep = first.call(first.service.get_sweep("team-a", sweep_id))
            return any(t.state == "paused" or t.rung > 1 for t in sweep.trials)

        wait_until(paused, timeout=300, interval=0.1, message="a trial to finish its first rung")

        def paused_hold_no_disk() -> bool:
            """A paused trial holds no disk: its job volume goes with its pair, its checkpoint is in the object
            store (read afresh each time: a promotion deploys the trial again)."""
            sweep = first.call(first.service.get_sweep("team-a", sweep_id))
            return all(leftovers(t.job_id) == [] for t in sweep.trials if t.state == "paused")

        wait_until(paused_hold_no_disk, timeout=120, interval=0.2, message="the paused trials' volumes to go")
    finally:
        first.kill()  # mid-sweep: trials may be running, queued or about to be promoted
    second = Harness(etcd_server, service_options)
    try:

        def done() -> SweepView | None:
            sweep = second.call(second.service.get_sweep("team-a", sweep_id))
            return sweep if sweep.status == "done" else None

        final = wait_until(
            done,
            timeout=600,
            interval=0.2,
            message=lambda: f"the sweep to end: {second.call(second.service.get_sweep('team-a', sweep_id))}",
        )
        driver = second.service.loop.driver
        assert driver is not None
        decisions = second.call(driver.store.decisions(sweep_id))
    finally:
        second.kill()

    starts = Counter(d.trial for d in decisions if d.action is Action.START)
    assert starts == {0: 1, 1: 1, 2: 1, 3: 1}  # no trial lost or started twice across the restart
    assert any(d.action is Action.PAUSE for d in decisions)
    assert any(d.action is Action.PROMOTE for d in decisions)
    best = best_trial(final)
    why = [(t.index, t.parameters, t.state, t.reason, t.job_status) for t in final.trials]
    assert best is not None and best.parameters == {"lr": "0.2"} and best.state == "completed", why
    assert best.results == pytest.approx((0.1 + 1 / 2, 0.1 + 1 / 4, 0.1 + 1 / 8))
    for trial in final.trials:
        steps = history_steps(scheduler_buckets, trial.job_id)
        # Each step trained once: a promoted trial resumed from its checkpoint, none recomputed.
        assert steps == list(range(1, trial.budget + 1)), (trial, steps)
        assert leftovers(trial.job_id) == []
        if trial.state == "stopped":
            assert "can no longer be promoted" in trial.reason, trial
            assert trial.freed_bytes > 0
            assert [k for k, _ in objects(scheduler_buckets, f"{trial.job_id}/") if "/checkpoints/" in k] == []
    assert final.freed_bytes == sum(t.freed_bytes for t in final.trials)
    assert final.freed_bytes > 0


def test_a_trial_that_never_reports_the_objective_fails_its_rung_with_the_reason(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    train = TRAIN.replace("val_loss=", "loss=")  # reports another metric
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("train.py", train)
    search = SEARCH.replace("trials: 4", "trials: 2")
    text = manifest(s3_server, "python3 train.py --lr ${lr}")
    view = harness.call(
        harness.service.submit_sweep("team-a", search, text, image=learner_image, model=chunks(archive))
    )

    def done() -> SweepView | None:
        sweep = harness.call(harness.service.get_sweep("team-a", view.sweep_id))
        return sweep if sweep.status == "done" else None

    final = wait_until(done, timeout=300, interval=0.2, message=f"{view.sweep_id} to end")
    assert [(t.state, t.reason) for t in final.trials] == [
        ("failed", "rung 1: the objective 'val_loss' was never reported up to step 2")
    ] * 2


HALT_ONLY = """\
import learner

learner.install_halt_handler()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
lr = float(learner.parameters()["lr"])
while step < 2000 and not learner.halt_requested():  # honours halts; never reads learner.budget()
    step += 1
    learner.log_metrics(step, val_loss=lr + 1.0 / step)
with learner.new_checkpoint(step) as path:
    (path / "state.txt").write_text(str(step))
"""

HALT_ONLY_SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: uniform, min: 0.0, max: 1.0}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 10, max: 90}
algorithm: {name: asha, eta: 3}
trials: 9
concurrency: 3
seed: 5
"""


def test_a_halt_aware_trial_that_never_reads_its_budget_stops_at_each_rung_s_step_exactly(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    """Issue 41's case: before the helper halted at the budget, each of the 9 trials trained to the last rung
    (810 of 810 steps) while the driver's own halt caught up with the stored history."""
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("train.py", HALT_ONLY)
    text = manifest(s3_server, "python3 train.py")
    view = harness.call(
        harness.service.submit_sweep("team-a", HALT_ONLY_SEARCH, text, image=learner_image, model=chunks(archive))
    )

    def done() -> SweepView | None:
        sweep = harness.call(harness.service.get_sweep("team-a", view.sweep_id))
        return sweep if sweep.status == "done" else None

    final = wait_until(done, timeout=600, interval=0.2, message=f"{view.sweep_id} to end")
    trained = 0
    for trial in final.trials:
        steps = history_steps(scheduler_buckets, trial.job_id)
        # Each rung ended at its budget's step, and a promotion resumed from that step's checkpoint.
        assert steps == list(range(1, trial.budget + 1)), (trial, steps)
        assert trial.state in ("completed", "stopped", "paused"), trial
        job = harness.call(harness.service.get("team-a", trial.job_id))
        assert job.status == "COMPLETED", job  # exit 0 at the budget: no halt asked of the platform, none resumed
        trained += len(steps)
    budgets = sorted(t.budget for t in final.trials)
    assert trained == sum(budgets) < 9 * 90, budgets
    # Rung 1's two worst are never in the top floor(n/3) of the first n to report: they stop at step 10.
    assert budgets[:2] == [10, 10], budgets


NEITHER = """\
import signal
import learner

# Reads no budget, never polls the halt, has no handler: it trains one step past its budget (2), then waits for a
# signal, so only the driver's halt (SIGTERM) ends it.
for step in (1, 2, 3):
    learner.log_metrics(step, val_loss=1.0 / step)
signal.pause()
"""


def test_a_learner_that_ignores_budget_and_halt_is_halted_once_its_history_shows_the_budget(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("train.py", NEITHER)
    search = (
        SEARCH.replace("asha, eta: 2", "random").replace("min: 2, max: 8", "max: 2").replace("trials: 4", "trials: 1")
    )
    text = manifest(s3_server, "python3 train.py")
    view = harness.call(
        harness.service.submit_sweep("team-a", search, text, image=learner_image, model=chunks(archive))
    )

    def done() -> SweepView | None:
        sweep = harness.call(harness.service.get_sweep("team-a", view.sweep_id))
        return sweep if sweep.status == "done" else None

    final = wait_until(done, timeout=300, interval=0.2, message=f"{view.sweep_id} to end")
    (trial,) = final.trials
    assert (trial.state, trial.results) == ("completed", (0.5,))  # the objective at step 2, its budget
    job = harness.call(harness.service.get("team-a", trial.job_id))
    assert job.status == "HALTED", job  # the driver's own halt: a HALTED job nobody halted would be resumed
    steps = history_steps(scheduler_buckets, trial.job_id)
    assert steps[:2] == [1, 2] and len(steps) < 2000  # trained past its budget until the halt, not to its end
