"""Sweeps on the real etcd that can no longer take the scheduler down or hang in silence.

- A sweep of concurrency 200 starts its 200 trials in one step: 401 keys, more than etcd's 128 operations in a
  transaction; they are written in transactions etcd takes, and a restarted scheduler has the same decisions.
- One sweep whose step fails is failed with its reason (one line) while the other sweeps and the loop go on.
- A sweep whose stored records cannot be read is failed at the start; the other sweeps are restored.

The backend is a stand-in that deploys nothing (the trials' jobs stay queued and deployed): what is under test is
the scheduler and etcd, which are real.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.admission.admit import AdmissionPolicy
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import LearnerEnd, NodeHealth, SidecarStates
from learnerkit.scheduler.config.policy import SubmitPolicy
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.facade import SweepView
from learnerkit.scheduler.sweeps.decisions import Action
from learnerkit.scheduler.sweeps.store import sweep_credentials_key, sweeps_root
from tests.integration.scheduler.conftest import Harness
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

STORE = "http://127.0.0.1:9"
MANIFEST = f"""\
name: trial
cpus: 1
memory: 1Gb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: data}}
    training_results: {{container: results}}
    connection: {{auth_url: "{STORE}", user_name: a, password: b}}
framework: {{name: custom, version: img, command: "train --lr ${{lr}}"}}
"""
SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: log_uniform, min: 0.0001, max: 0.1}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, max: 10}
algorithm: {name: random}
trials: TRIALS
concurrency: TRIALS
seed: 7
"""


GRID = """\
manifest: manifest.yml
parameters:
  offset: {type: integer, min: 0, max: 1000000000}
  lr: {type: choice, values: ["0.1", "0.2"]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, max: 10}
algorithm: {name: grid}
trials: 3
concurrency: 3
"""
FLAT_BYTES = 16 * 1024 * 1024
"""What submitting, starting and restoring the grid sweep may allocate at its peak (0.33 MiB measured: the etcd
calls, the jobs, the scheduler restarted); enumerating the grid would take GiBs."""


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


@pytest.fixture
def options(etcd_server: Any) -> SchedulerOptions:
    return SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="sidecar"),
        catalog=None,
        resolve_image=lambda manifest: "learner",
        policy=AdmissionPolicy(ready_timeout_s=3600),
        submit_policy=SubmitPolicy(object_stores=(STORE,)),
        interval_s=0.05,
    )


@pytest.fixture
def root() -> str:
    return f"/lk-test-{uuid.uuid4().hex[:8]}/jobs"


@pytest.fixture
def started(etcd_server: Any, options: SchedulerOptions, root: str) -> Iterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for harness in made:
        harness.kill()


def start(etcd_server: Any, options: SchedulerOptions, root: str, made: list[Harness]) -> Harness:
    harness = Harness(etcd_server, options, root=root, backend=IdleBackend())  # type: ignore[arg-type]
    made.append(harness)
    return harness


def search(trials: int) -> str:
    return SEARCH.replace("TRIALS", str(trials))


def submit(harness: Harness, trials: int) -> str:
    view = harness.call(harness.service.submit_sweep("team-a", search(trials), MANIFEST))
    return view.sweep_id


def sweep(harness: Harness, sweep_id: str) -> SweepView:
    return harness.call(harness.service.get_sweep("team-a", sweep_id))


def test_a_sweep_of_concurrency_200_starts_its_trials_and_a_restart_keeps_its_decisions(
    etcd_server: Any, options: SchedulerOptions, root: str, started: list[Harness]
) -> None:
    first = start(etcd_server, options, root, started)
    sweep_id = submit(first, 200)
    view = wait_until(
        lambda: (v := sweep(first, sweep_id)) and len(v.trials) == 200 and v,
        timeout=60,
        interval=0.1,
        message=lambda: f"200 trials to start: {len(sweep(first, sweep_id).trials)} started",
    )
    driver = first.service.loop.driver
    assert driver is not None
    decisions = first.call(driver.store.decisions(sweep_id))
    assert [(d.action, d.trial) for d in decisions] == [(Action.START, i) for i in range(200)]
    assert {t.state for t in view.trials} == {"running"}
    wait_until(
        lambda: len(first.call(first.service.list_jobs("team-a"))) == 200,
        timeout=60,
        interval=0.1,
        message="the 200 trials' jobs",
    )
    jobs = first.call(first.service.list_jobs("team-a"))
    assert sorted(j.job_id for j in jobs) == sorted(t.job_id for t in view.trials)
    first.kill()

    second = start(etcd_server, options, root, started)
    restored = sweep(second, sweep_id)
    assert [(t.index, t.state, t.parameters) for t in restored.trials] == [
        (t.index, t.state, t.parameters) for t in view.trials
    ]
    again = second.service.loop.driver
    assert again is not None
    assert second.call(again.store.decisions(sweep_id)) == decisions
    second.call(second.service.loop.guarded_step())
    assert second.call(again.store.decisions(sweep_id)) == decisions  # nothing decided twice


def test_a_grid_of_two_billion_points_with_3_trials_keeps_memory_flat_and_the_scheduler_starts_again(
    etcd_server: Any, options: SchedulerOptions, root: str, started: list[Harness]
) -> None:
    first = start(etcd_server, options, root, started)
    tracemalloc.start()
    try:
        sweep_id = first.call(first.service.submit_sweep("team-a", GRID, MANIFEST)).sweep_id
        wait_until(lambda: len(sweep(first, sweep_id).trials) == 3, timeout=30, interval=0.05, message="3 trials")
        first.kill()
        second = start(etcd_server, options, root, started)
        restored = sweep(second, sweep_id)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < FLAT_BYTES, f"{peak} bytes at the peak"
    assert [t.parameters for t in restored.trials] == [
        {"offset": 0, "lr": "0.1"},
        {"offset": 0, "lr": "0.2"},
        {"offset": 1, "lr": "0.1"},
    ]
    assert restored.status == "running" and restored.trials_total == 3


def test_a_sweep_whose_step_fails_is_failed_with_its_reason_and_the_loop_goes_on(
    etcd_server: Any, options: SchedulerOptions, root: str, started: list[Harness], caplog: pytest.LogCaptureFixture
) -> None:
    harness = start(etcd_server, options, root, started)
    broken_id = submit(harness, 3)
    wait_until(lambda: len(sweep(harness, broken_id).trials) == 3, timeout=30, interval=0.05, message="3 trials")
    driver = harness.service.loop.driver
    assert driver is not None
    broken = driver.sweeps[broken_id]
    keys = ", ".join(f"/learnerkit/sweeps/{broken_id}/trials/{i:06d}" for i in range(400))

    def fill() -> list[Any]:
        raise RuntimeError(f"write {keys}: etcd failed\nsecond line")

    broken.book.fill = fill  # type: ignore[method-assign]
    stepped = harness.service.loop.stepped_at
    failed = wait_until(
        lambda: (v := sweep(harness, broken_id)).status == "failed" and v,
        timeout=30,
        interval=0.05,
        message=lambda: f"the sweep to fail: {sweep(harness, broken_id)}",
    )
    assert failed.reason.startswith("its step failed: write /learnerkit/sweeps/"), failed.reason
    assert failed.reason.endswith("...") and len(failed.reason) <= 320 and "\n" not in failed.reason, failed.reason
    logged = [r.getMessage() for r in caplog.records if broken_id in r.getMessage()]
    assert logged and all(len(line) < 400 and "\n" not in line for line in logged), logged

    other_id = submit(harness, 2)  # a new sweep starts: the loop goes on
    wait_until(lambda: len(sweep(harness, other_id).trials) == 2, timeout=30, interval=0.05, message="2 trials")
    assert harness.service.loop.stepped_at is not None and stepped is not None
    assert harness.service.loop.stepped_at > stepped and harness.service.loop.stalled() is None
    state = harness.call(_get_json(harness, f"{sweeps_root(root)}/{broken_id}/state"))
    assert state["status"] == "failed" and state["reason"] == failed.reason


def test_a_sweep_whose_records_cannot_be_read_is_failed_and_the_others_start(
    etcd_server: Any, options: SchedulerOptions, root: str, started: list[Harness]
) -> None:
    first = start(etcd_server, options, root, started)
    good_id, bad_id = submit(first, 2), submit(first, 2)
    for sweep_id in (good_id, bad_id):
        wait_until(lambda s=sweep_id: len(sweep(first, s).trials) == 2, timeout=30, interval=0.05, message="trials")
    first.kill()

    async def corrupt() -> None:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            await etcd.put(f"{sweeps_root(root)}/{bad_id}/trials/000001", b'{"index": "one"')
        finally:
            await etcd.close()

    asyncio.run(corrupt())
    second = start(etcd_server, options, root, started)
    assert [t.index for t in sweep(second, good_id).trials] == [0, 1]
    state = second.call(_get_json(second, f"{sweeps_root(root)}/{bad_id}/state"))
    assert state["status"] == "failed", state
    assert state["reason"].startswith("its records in etcd cannot be read: JSONDecodeError"), state
    assert state["decisions"] == 2  # its decisions stay counted (shown by `sweep status` once readable)
    held = [
        second.call(second.service.shared.store.etcd.get(sweep_credentials_key(s, root))) for s in (good_id, bad_id)
    ]
    assert held[0] is not None and held[1] is None  # no driver holds the failed one to delete them as it ends


def test_a_job_whose_records_cannot_be_read_is_left_out_and_the_others_start(
    etcd_server: Any, options: SchedulerOptions, root: str, started: list[Harness]
) -> None:
    first = start(etcd_server, options, root, started)
    good = first.call(first.service.submit("team-a", MANIFEST)).job_id
    bad = first.call(first.service.submit("team-a", MANIFEST)).job_id
    first.kill()

    async def corrupt() -> None:
        etcd = await EtcdStore.connect(etcd_server.settings())
        try:
            await etcd.put(f"{root}/{bad}/status", b'{"job_id": "' + bad.encode() + b'"}')
        finally:
            await etcd.close()

    asyncio.run(corrupt())
    second = start(etcd_server, options, root, started)
    assert [j.job_id for j in second.call(second.service.list_jobs("team-a"))] == [good]


async def _get_json(harness: Harness, key: str) -> Any:
    found = await harness.service.shared.store.etcd.get(key)
    assert found is not None, key
    return json.loads(found[0])
