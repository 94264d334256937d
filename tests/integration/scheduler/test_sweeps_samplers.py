"""The samplers end to end on the Docker backend: real etcd, SeaweedFS, learner pairs and sidecars.

- `tpe`: one trial at a time, so each trial's parameters follow from the results of the trials before it; the
  test asks Optuna's TPE again with those results (in trial order, the sweep's seed) and gets each trial's, the
  scheduler having been killed after the third trial started and another having finished the sweep.
- `hyperband`: a bracket of four trials from rung 1 (the top half go on, then the top one), and a bracket of
  one from rung 2, trained from scratch to that rung's budget; every step trained once.
- `asha` with `sampler: tpe`: the decisions and suggestions of the pure core and TPE on the same values.
- `pbt`: two generations of two; the worse trial of the first copies the better one's checkpoint (its learner
  restores it and goes on from its step), and `sweep status` shows the lineage; the scheduler is killed once the
  second generation has started, and another finishes the sweep.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.facade import SweepView
from learnerkit.scheduler.sweeps.books import plan_of, restore_book
from learnerkit.scheduler.sweeps.decisions import Action, Decision
from learnerkit.scheduler.sweeps.searchfile import parse_search_file
from learnerkit.scheduler.sweeps.spec import Goal
from learnerkit.scheduler.sweeps.suggest import new_config
from learnerkit.scheduler.sweeps.tpe import Observation, tpe_config
from tests.integration.scheduler.conftest import RESULTS_BUCKET, Harness, leftovers, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

TRAIN = """\
import json, os
import learner

lr = float(learner.parameters()["lr"])
quality = abs(lr - 0.2) + 0.1  # 0.2 is the best at every step
limit = learner.budget()
ckpt = learner.latest_checkpoint()
state = json.loads((ckpt.path / "state.json").read_text()) if ckpt else {"lrs": []}
step = ckpt.step if ckpt else 0
state["lrs"].append(lr)
while not limit.reached(step):
    step += 1
    learner.log_metrics(step, val_loss=quality + 1.0 / step, first_lr=state["lrs"][0])
with learner.new_checkpoint(step) as path:
    (path / "state.json").write_text(json.dumps(state))
"""


async def chunks(path: Path) -> AsyncIterator[bytes]:
    yield path.read_bytes()


def model_zip(tmp_path: Path) -> Path:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("train.py", TRAIN)
    return archive


def history(client: Any, job_id: str) -> list[dict[str, Any]]:
    """Every record of the trial's metric history, attempts in order."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=RESULTS_BUCKET, Prefix=f"{job_id}/")
    keys = sorted(item["Key"] for page in pages for item in page.get("Contents", []))
    records: list[dict[str, Any]] = []
    for key in keys:
        if key.endswith("/logs/metrics.jsonl"):
            body = client.get_object(Bucket=RESULTS_BUCKET, Key=key)["Body"].read().decode()
            records += [json.loads(line) for line in body.splitlines() if line.strip()]
    return records


def run_sweep(
    harness: Harness,
    search: str,
    s3_server: Any,
    image: str,
    tmp_path: Path,
    *,
    restart_after: int | None = None,
    restarted: Callable[[], Harness] | None = None,
) -> tuple[Harness, SweepView]:
    """Run the sweep to its end; with `restart_after`, the scheduler is killed once that many trials have started
    and one made by `restarted` finishes the sweep from etcd alone. The scheduler that finished, and the sweep."""
    text = manifest(s3_server, "python3 train.py")
    view = harness.call(
        harness.service.submit_sweep("team-a", search, text, image=image, model=chunks(model_zip(tmp_path)))
    )
    if restart_after is not None and restarted is not None:
        first = harness
        try:
            wait_until(
                lambda: len(first.call(first.service.get_sweep("team-a", view.sweep_id)).trials) >= restart_after,
                timeout=300,
                interval=0.1,
                message=f"{restart_after} trials to start",
            )
        finally:
            first.kill()  # mid-sweep: trials may be running, queued or about to start
        harness = restarted()

    def done() -> SweepView | None:
        sweep = harness.call(harness.service.get_sweep("team-a", view.sweep_id))
        return sweep if sweep.status in ("done", "failed") else None

    try:
        final = wait_until(
            done,
            timeout=600,
            interval=0.2,
            message=lambda: f"the sweep to end: {harness.call(harness.service.get_sweep('team-a', view.sweep_id))}",
        )
    except BaseException:
        if restarted is not None:  # the fixture's harness is the fixture's to kill; this one is ours
            harness.kill()
        raise
    assert final.status == "done", final
    return harness, final


TPE = """\
manifest: manifest.yml
parameters:
  lr: {type: uniform, min: 0.0, max: 1.0}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, max: 2}
algorithm: {name: tpe, startup: 2}
trials: 4
concurrency: 1
seed: 11
"""


def test_tpe_suggests_each_trial_from_the_results_before_it_across_a_restart(
    etcd_server: Any,
    service_options: SchedulerOptions,
    s3_server: Any,
    scheduler_buckets: Any,
    learner_image: str,
    tmp_path: Path,
) -> None:
    first = Harness(etcd_server, service_options)
    last, final = run_sweep(
        first,
        TPE,
        s3_server,
        learner_image,
        tmp_path,
        restart_after=3,
        restarted=lambda: Harness(etcd_server, service_options),
    )
    last.kill()
    assert [t.state for t in final.trials] == ["completed"] * 4
    spec = parse_search_file(TPE, Path("search.yml"))
    seen: list[Observation] = []
    for trial in final.trials:
        expected = tpe_config(spec.space, Goal.MINIMIZE, seed=11, index=trial.index, startup=2, seen=seen)
        assert trial.parameters == pytest.approx(dict(expected)), (trial.index, seen)
        lr = float(trial.parameters["lr"])
        assert trial.results == pytest.approx((abs(lr - 0.2) + 0.1 + 1 / 2,))
        seen.append(Observation(trial.parameters, ((2, trial.results[0]),), completed=True))
        assert [r["step"] for r in history(scheduler_buckets, trial.job_id)] == [1, 2]
        assert leftovers(trial.job_id) == []


HYPERBAND = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: [0.1, 0.2, 0.3, 0.5]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 1, max: 4}
algorithm: {name: hyperband, eta: 2}
trials: 5
concurrency: 2
seed: 2
"""


def test_hyperband_runs_brackets_of_successive_halving_on_checkpoints(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    _, final = run_sweep(harness, HYPERBAND, s3_server, learner_image, tmp_path)
    driver = harness.service.loop.driver
    assert driver is not None
    decisions = harness.call(driver.store.decisions(final.sweep_id))
    starts = {d.trial: (d.rung, d.budget) for d in decisions if d.action is Action.START}
    assert starts == {0: (0, 1), 1: (0, 1), 2: (0, 1), 3: (0, 1), 4: (1, 2)}, "the second bracket starts at rung 2"
    first = [t for t in final.trials if t.index < 4]
    promoted = {d.trial for d in decisions if d.action is Action.PROMOTE and d.rung == 1 and d.trial < 4}
    ranked = sorted(first, key=lambda t: (t.results[0], t.index))
    assert promoted == {ranked[0].index, ranked[1].index}, "the top half of the first bracket's rung 1"
    completed = [t for t in final.trials if t.state == "completed"]
    assert sorted(t.index for t in completed) == sorted({ranked[0].index, 4} if ranked[0].index != 4 else {4})
    for trial in final.trials:
        steps = [r["step"] for r in history(scheduler_buckets, trial.job_id)]
        start = 1
        assert steps == list(range(start, trial.budget + 1)), (trial, steps)  # resumed, never recomputed
        assert leftovers(trial.job_id) == []
        if trial.state == "stopped":
            assert "only the top 1 continue" in trial.reason or "only the top 2 continue" in trial.reason, trial
    assert final.trials[4].first_rung == 2 and final.trials[4].results[0] == pytest.approx(
        abs(float(final.trials[4].parameters["lr"]) - 0.2) + 0.1 + 1 / 2
    )


PBT = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: [0.1, 0.2, 0.3, 0.6]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 2, max: 4}
algorithm: {name: pbt, population: 2, truncation: 0.5, resample: 0.3}
concurrency: 2
seed: 4
"""


def test_pbt_copies_the_better_checkpoint_and_records_the_lineage_across_a_restart(
    etcd_server: Any,
    service_options: SchedulerOptions,
    s3_server: Any,
    scheduler_buckets: Any,
    learner_image: str,
    tmp_path: Path,
) -> None:
    """The scheduler is killed once the second generation has started (its parents chosen, their checkpoints being
    copied or copied): the next one restores the same lineage and starts no trial twice."""
    first = Harness(etcd_server, service_options)
    harness, final = run_sweep(
        first,
        PBT,
        s3_server,
        learner_image,
        tmp_path,
        restart_after=3,
        restarted=lambda: Harness(etcd_server, service_options),
    )
    try:
        driver = harness.service.loop.driver
        assert driver is not None
        decisions = harness.call(driver.store.decisions(final.sweep_id))
    finally:
        harness.kill()
    assert [t.state for t in final.trials] == ["completed"] * 4
    generation = sorted(final.trials[:2], key=lambda t: (t.results[0], t.index))
    better, worse = generation[0], generation[1]
    own, copier = final.trials[2 + better.index], final.trials[2 + worse.index]
    assert own.lineage == (better.index,) and own.parameters == better.parameters
    assert copier.lineage == (better.index,), "the worse trial's next one starts from the better's checkpoint"
    assert Counter(d.trial for d in decisions if d.action is Action.START) == {0: 1, 1: 1, 2: 1, 3: 1}
    [started] = [d for d in decisions if d.action is Action.START and d.trial == copier.index]
    assert f"copies trial {better.index} (1st of 2), perturbed" in started.reason, started
    for parent, child in ((better, own), (better, copier)):
        records = history(scheduler_buckets, child.job_id)
        assert [r["step"] for r in records] == [3, 4], "it went on from its parent's checkpoint at step 2"
        assert {r["values"]["first_lr"] for r in records} == {float(parent.parameters["lr"])}
    for trial in final.trials:
        assert leftovers(trial.job_id) == []


ASHA_TPE = """\
manifest: manifest.yml
parameters:
  lr: {type: uniform, min: 0.0, max: 1.0}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 1, max: 2}
algorithm: {name: asha, eta: 2, sampler: tpe, startup: 2}
trials: 4
concurrency: 1
seed: 5
"""


def test_asha_s_rungs_with_a_tpe_sampler_decide_as_the_pure_core_does(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    """One trial at a time, so the sweep in containers takes the decisions and suggestions of the decision core
    and TPE run on the same learner's values (TPE told the paused and stopped trials as pruned)."""
    _, final = run_sweep(harness, ASHA_TPE, s3_server, learner_image, tmp_path)
    driver = harness.service.loop.driver
    assert driver is not None
    decisions = harness.call(driver.store.decisions(final.sweep_id))
    spec = parse_search_file(ASHA_TPE, Path("search.yml"))
    book = restore_book(plan_of(spec))
    parameters: dict[int, Mapping[str, Any]] = {}
    expected: list[Decision] = []
    queue = book.fill()
    while queue:
        decision = queue.pop(0)
        expected.append(decision)
        if decision.action is Action.START:
            parameters[decision.trial] = new_config(spec, book, decision.trial, parameters)
        if decision.action in (Action.START, Action.PROMOTE):
            value = abs(float(parameters[decision.trial]["lr"]) - 0.2) + 0.1 + 1.0 / decision.budget
            queue += book.report(decision.trial, value) + book.fill()
    assert decisions == expected
    assert any(d.action is Action.PROMOTE for d in decisions) and any(d.action is Action.STOP for d in decisions)
    assert {t.index: dict(t.parameters) for t in final.trials} == {i: dict(p) for i, p in parameters.items()}
    for trial in final.trials:
        steps = [r["step"] for r in history(scheduler_buckets, trial.job_id)]
        assert steps == list(range(1, trial.budget + 1)), (trial, steps)
