"""Promotion in place end to end: the scheduler with real etcd and SeaweedFS, each learner pair this checkout's real
sidecar and `learner-run` as processes of this host (`bench/processbackend.py`), a stand-in learner that asks for its
next budget at each rung (`learner.next_budget`).

A trial continued at its rung there and then trains on in the same learner process (one start per trial) and
trains each step once; one not answered within its wait (the scheduler is down) checkpoints and ends its rung as
before, and the restarted scheduler goes on from that checkpoint by a new attempt; one that still waits when the
scheduler is back is answered by the new one and trains on in place.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.processbackend import ProcessBackend
from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.facade import SweepView
from learnerkit.scheduler.sweeps.decisions import Action
from tests.integration.scheduler.conftest import RESULTS_BUCKET, Harness, chunks, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

TRAIN = """\
import os
import learner

quality = {"0.1": 0.5, "0.2": 0.1}[os.environ["lr"]]
limit = learner.budget()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
if ckpt is None and "HOLD_FIFO" in os.environ:
    open(os.environ["HOLD_FIFO"]).close()  # held until the test opens the FIFO to write: see release()
while not limit.reached(step):
    step += 1
    learner.log_metrics(step, val_loss=quality + 1.0 / step)
    if limit.reached(step):
        limit = learner.next_budget(step) or limit
with learner.new_checkpoint(step) as path:
    (path / "step").write_text(str(step))
"""

SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: ["0.1", "0.2"]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 2, max: 8}
algorithm: {name: median_stop, eta: 2}
trials: 2
concurrency: 2
seed: 3
"""
"""The median rule continues every trial while fewer than 3 others have reported a rung: each continues at once."""


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[ProcessBackend]:
    made = ProcessBackend(tmp_path / "pairs")
    yield made
    made.close()


@pytest.fixture
def where() -> str:
    """The test's own job root: a restarted scheduler restores only its jobs."""
    return f"/lk-test-{uuid.uuid4().hex[:8]}/jobs"


@pytest.fixture
def options(etcd_server: Any, s3_server: Any, where: str) -> SchedulerOptions:
    return SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="sidecar", etcd_root=where),
        catalog=None,
        resolve_image=lambda manifest: "learner",
        policy=AdmissionPolicy(ready_timeout_s=120),
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
        interval_s=0.05,
    )


@pytest.fixture
def start(
    etcd_server: Any, options: SchedulerOptions, backend: ProcessBackend, where: str
) -> Iterator[Callable[[], Harness]]:
    """Starts a scheduler over the test's job root and process pairs; each is killed at the test's end."""
    made: list[Harness] = []

    def started() -> Harness:
        harness = Harness(etcd_server, options, root=where, backend=backend)
        made.append(harness)
        return harness

    yield started
    for harness in made:
        harness.kill()


def submit(harness: Harness, s3_server: Any, tmp_path: Path, search: str, command: str) -> str:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("train.py", TRAIN)
    text = manifest(s3_server, command)
    view = harness.call(harness.service.submit_sweep("team-a", search, text, model=chunks(archive)))
    return view.sweep_id


def done(harness: Harness, sweep_id: str, timeout: float = 300) -> SweepView:
    def ended() -> SweepView | None:
        sweep = harness.call(harness.service.get_sweep("team-a", sweep_id))
        return sweep if sweep.status == "done" else None

    return wait_until(
        ended,
        timeout=timeout,
        interval=0.1,
        message=lambda: f"{sweep_id} to end: {harness.call(harness.service.get_sweep('team-a', sweep_id))}",
    )


def history_steps(client: Any, job_id: str) -> list[int]:
    """Every step of the trial's stored metric history, every attempt's."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=RESULTS_BUCKET, Prefix=f"{job_id}/")
    steps: list[int] = []
    for item in sorted((i for page in pages for i in page.get("Contents", [])), key=lambda i: i["Key"]):
        if item["Key"].endswith("/logs/metrics.jsonl"):
            body = client.get_object(Bucket=RESULTS_BUCKET, Key=item["Key"])["Body"].read().decode()
            steps += [json.loads(line)["step"] for line in body.splitlines() if line.strip()]
    return steps


def test_in_place_promotion_trains_each_step_once_and_starts_one_learner_process_per_trial(
    s3_server: Any,
    scheduler_buckets: Any,
    backend: ProcessBackend,
    start: Callable[[], Harness],
    tmp_path: Path,
) -> None:
    harness = start()
    sweep_id = submit(harness, s3_server, tmp_path, SEARCH, "python3 train.py")
    final = done(harness, sweep_id)
    driver = harness.service.loop.driver
    assert driver is not None
    decisions = harness.call(driver.store.decisions(sweep_id))
    continued = [d for d in decisions if d.action is Action.CONTINUE]
    assert len(continued) == 4, decisions  # each of the 2 trials past rungs 1 and 2
    assert all(d.reason.endswith("promoted in place: the same learner process trains on") for d in continued)
    for trial in final.trials:
        assert (trial.state, trial.rung, len(trial.results)) == ("completed", 3, 3), trial
        assert backend.learner_starts[trial.job_id] == 1, backend.learner_starts
        assert history_steps(scheduler_buckets, trial.job_id) == list(range(1, 9))


ONE_TRIAL = SEARCH.replace("trials: 2", "trials: 1").replace("concurrency: 2", "concurrency: 1")


def training(harness: Harness, job_id: str) -> None:
    """Wait until the trial's learner trains (its job is made by the driver's next step after the submit)."""

    def processing() -> bool:
        tracked = harness.service.shared.jobs.get(job_id)
        return tracked is not None and tracked.state.status.value == "PROCESSING"

    wait_until(processing, timeout=120, interval=0.05, message=f"{job_id} to train")


def boundary_waits(etcd_server: Any, where: str, job_id: str) -> bool:
    """Whether the trial's sidecar has put its learner's request for the next budget in etcd (read without a
    scheduler: none runs meanwhile)."""

    async def read() -> bool:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            return await etcd.get(keys.learner_boundary_key(job_id, 1, where)) is not None
        finally:
            await etcd.close()

    return asyncio.run(read())


def release(fifo: Path) -> None:
    """Let the learner held on ``fifo`` go: a write end opens (without blocking) only once its read end is open,
    and the learner's open returns as it does."""

    def opened() -> bool:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: the learner has not opened it yet
                raise
            return False
        return True

    wait_until(opened, timeout=60, interval=0.05, message="the learner to wait on its hold")


def waiting_unanswered(
    start: Callable[[], Harness], etcd_server: Any, s3_server: Any, where: str, tmp_path: Path, wait_s: int
) -> tuple[str, str]:
    """Submit one trial whose learner waits ``wait_s`` for an answer, held before its first step until its
    scheduler is killed: it reaches its first boundary with none to answer. The sweep's and the trial's ids."""
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    first = start()
    sweep_id = submit(
        first, s3_server, tmp_path, ONE_TRIAL, f"HOLD_FIFO={hold} LEARNER_PROMOTION_WAIT={wait_s} python3 train.py"
    )
    job_id = f"{sweep_id}-t0000"
    training(first, job_id)
    first.kill()
    release(hold)
    wait_until(lambda: boundary_waits(etcd_server, where, job_id), timeout=60, interval=0.05, message="its boundary")
    return sweep_id, job_id


def test_a_trial_unanswered_within_its_wait_checkpoints_and_a_restarted_scheduler_resumes_it(
    etcd_server: Any,
    s3_server: Any,
    scheduler_buckets: Any,
    backend: ProcessBackend,
    start: Callable[[], Harness],
    where: str,
    tmp_path: Path,
) -> None:
    sweep_id, job_id = waiting_unanswered(start, etcd_server, s3_server, where, tmp_path, wait_s=1)
    wait_until(lambda: backend.learners_ended(job_id), timeout=60, interval=0.1, message="the learner to end its rung")
    final = done(start(), sweep_id)
    [trial] = final.trials
    assert (trial.state, len(trial.results)) == ("completed", 3), trial
    assert backend.learner_starts[job_id] == 2  # the rung it gave up at ended; then one more, resumed in place
    assert history_steps(scheduler_buckets, job_id) == list(range(1, 9))  # from its checkpoint: no step twice


def test_a_trial_still_waiting_when_the_scheduler_is_back_is_promoted_in_place_by_the_new_one(
    etcd_server: Any,
    s3_server: Any,
    scheduler_buckets: Any,
    backend: ProcessBackend,
    start: Callable[[], Harness],
    where: str,
    tmp_path: Path,
) -> None:
    sweep_id, job_id = waiting_unanswered(start, etcd_server, s3_server, where, tmp_path, wait_s=120)
    final = done(start(), sweep_id)
    [trial] = final.trials
    assert (trial.state, len(trial.results)) == ("completed", 3), trial
    assert backend.learner_starts[job_id] == 1
    assert history_steps(scheduler_buckets, job_id) == list(range(1, 9))
