"""The sweep driver rebuilt from stored records: what the book decides on review is kept for the next step."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.sweepdriver import OVERLAP_BYTES, SweepDriver, active_sweep
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.facade import FileStream
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.submission import SubmitOptions
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.sweeps.decisions import Action, TrialRecord, TrialState
from learnerkit.scheduler.sweeps.searchfile import parse_search_file
from learnerkit.scheduler.sweeps.store import StoredSweep, StoredTrial, SweepSpecRecord, SweepState

REPO = Path(__file__).resolve().parents[4]
MANIFEST = (REPO / "tests/unit/scheduler/manifests/learnerkit-pytorch-ddp.yml").read_text()
SEARCH = """\
manifest: manifest.yml
parameters:
  lr: {type: choice, values: ["0.1", "0.2", "0.3"]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 1, max: 3}
algorithm: {name: asha, eta: 3}
trials: 3
"""


def test_paused_trials_stored_as_hopeless_are_stopped_by_the_first_step_after_a_restart() -> None:
    """A crash after a stop removed a trial's checkpoints but before it was recorded leaves it paused; the
    rebuilt book stops it again instead of leaving the sweep open for ever."""
    spec = parse_search_file(SEARCH, Path("search.yml"))
    manifest = parse_manifest(MANIFEST)
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml")
    trials = {
        i: StoredTrial(TrialRecord(i, TrialState.PAUSED, 0, (0.1 * (i + 1),)), f"sweep-x-t{i:04d}", {"lr": "0.1"})
        for i in range(3)
    }
    sweep = active_sweep(record, spec, manifest, SubmitOptions(), SweepState(decisions=6), trials)
    assert [(d.action, d.trial) for d in sweep.pending] == [(Action.STOP, 1), (Action.STOP, 2)]
    assert sweep.pending[0].reason == "rung 1: 2nd of 3, at most 1 of 3 can continue: it can no longer be promoted"


def test_a_restored_sweep_parses_its_manifest_with_the_submit_s_image() -> None:
    """Trials started after a restart run the image the submit named, not the framework's default."""
    seen: list[str | None] = []

    async def parse(text: str, source: str, tenant: str, image: str | None) -> JobManifest:
        seen.append(image)
        return parse_manifest(text, source, image=image)

    driver = SweepDriver(cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None), parse, cast(Any, None))
    options = SubmitOptions(image="registry.example/learner:1")
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml", options.to_raw())
    sweep = asyncio.run(driver._restore(StoredSweep(record, SweepState(), {})))
    assert seen == ["registry.example/learner:1"]
    assert sweep.manifest.extensions.image == "registry.example/learner:1"


class _History:
    """The outputs reader's metric history of attempt 1, from lines given here; counts the bytes it serves."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.appended: list[str] = []
        """What the sidecar stores after the learner's lines (its TensorBoard records)."""
        self.served = 0

    def _data(self) -> bytes:
        return "".join(line + "\n" for line in self.lines + self.appended).encode()

    async def metrics_history(self, endpoints: object, manifest: object, state: object, learner: int) -> FileStream:
        data = self._data()
        self.served += len(data)
        return FileStream(iter([data]), len(data))

    async def metrics_after(
        self, endpoints: object, manifest: object, state: object, attempt: int, offset: int
    ) -> tuple[bytes, int] | None:
        data = self._data() if attempt == 1 else b""
        self.served += len(data) - offset
        return data[offset:], offset


def test_a_rung_result_is_never_a_value_of_an_earlier_rung() -> None:
    """A promoted trial whose new attempt reports nothing fails its rung, instead of being ranked on the value
    it reported at the end of the rung before."""
    spec = parse_search_file(SEARCH, Path("search.yml"))
    manifest = parse_manifest(MANIFEST)
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml")
    trial = StoredTrial(TrialRecord(0, TrialState.RUNNING, 1, (0.5,)), "sweep-x-t0000", {"lr": "0.1"}, 2)
    sweep = active_sweep(record, spec, manifest, SubmitOptions(), SweepState(), {0: trial})
    shared = cast(Any, SimpleNamespace(options=SimpleNamespace(platform=Platform("http://127.0.0.1:2379", "s"))))
    reader = cast(Any, _History(['{"step": 1, "values": {"val_loss": 0.5}}']))
    driver = SweepDriver(shared, cast(Any, None), cast(Any, None), reader, cast(Any, None), cast(Any, None))
    tracked = Tracked(JobState("sweep-x-t0000", "team-a", "job", 0.0, attempt=2), manifest, MANIFEST, "m.yml")
    assert asyncio.run(driver._rung_result(sweep, trial, tracked)) == (
        None,
        None,
        "the objective 'val_loss' was never reported after step 1 up to 3",
    )
    reader.lines.append('{"step": 3, "values": {"val_loss": 0.25}}')
    assert asyncio.run(driver._rung_result(sweep, trial, tracked)) == (3, 0.25, "")


def test_a_running_trial_s_history_is_read_from_where_the_last_read_stopped() -> None:
    """Every 5 s the driver reads a running trial's history: the bytes stored since the last read (and the last
    `OVERLAP_BYTES` again, to see the file grew at its end), never all again. A file stored anew, the learner's
    lines then the sidecar's TensorBoard records, is read whole again, and nothing is counted twice."""
    spec = parse_search_file(SEARCH, Path("search.yml"))
    manifest = parse_manifest(MANIFEST)
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml")
    trial = StoredTrial(TrialRecord(0, TrialState.RUNNING, 0), "sweep-x-t0000", {"lr": "0.1"})
    sweep = active_sweep(record, spec, manifest, SubmitOptions(), SweepState(), {0: trial})
    shared = cast(Any, SimpleNamespace(options=SimpleNamespace(platform=Platform("http://127.0.0.1:2379", "s"))))
    lines = [f'{{"step": {step}, "values": {{"val_loss": {1 / step}}}}}' for step in range(1, 1001)]
    reader = _History(lines[:500])
    driver = SweepDriver(shared, cast(Any, None), cast(Any, None), cast(Any, reader), cast(Any, None), cast(Any, None))
    tracked = Tracked(JobState("sweep-x-t0000", "team-a", "job", 0.0), manifest, MANIFEST, "m.yml")
    first = asyncio.run(driver._history(sweep, tracked))
    assert [step for step, _ in first] == list(range(1, 501))
    reader.lines += lines[500:]
    second = asyncio.run(driver._history(sweep, tracked))
    assert [step for step, _ in second] == list(range(1, 1001)) and second[-1] == (1000, 1 / 1000)
    whole = len("".join(line + "\n" for line in lines))
    assert reader.served == whole + OVERLAP_BYTES, f"{reader.served} bytes read for a history of {whole}"

    reader.appended = ['{"step": 1000, "values": {"accuracy": 0.9}, "source": "tensorboard"}']
    reader.lines.append('{"step": 1001, "values": {"val_loss": 0.0005}}')
    asyncio.run(driver._history(sweep, tracked))  # grown at its end: read from the last offset
    reader.lines.append('{"step": 1002, "values": {"val_loss": 0.0004}}')  # stored anew: lines moved
    third = asyncio.run(driver._history(sweep, tracked))
    assert [step for step, _ in third] == list(range(1, 1003)), [step for step, _ in third][-5:]


class _Records:
    """The sweep store's `record`: what the driver writes, the state kept as written."""

    def __init__(self) -> None:
        self.trials: list[StoredTrial] = []

    async def record(
        self, sweep_id: str, state: SweepState, decisions: object, trials: list[StoredTrial]
    ) -> SweepState:
        self.trials += trials
        return state


class _Requeues:
    def __init__(self) -> None:
        self.requeued: list[str] = []

    async def requeue(self, tracked: Tracked, reason: str, restart: bool) -> None:
        self.requeued.append(tracked.state.job_id)


def test_a_sweep_resumed_while_a_trial_still_halts_resumes_that_trial_once_it_has_halted() -> None:
    """`sweep halt` then `sweep resume` at once: a trial whose job was still halting (not HALTED yet) was left
    HALTED for ever and the sweep never ended. It is resumed once its job has halted."""
    spec = parse_search_file(SEARCH, Path("search.yml"))
    manifest = parse_manifest(MANIFEST)
    record = SweepSpecRecord("sweep-x", "team-a", 0.0, SEARCH, "search.yml", MANIFEST, "manifest.yml")
    trial = StoredTrial(TrialRecord(0, TrialState.RUNNING, 0), "sweep-x-t0000", {"lr": "0.1"})
    sweep = active_sweep(record, spec, manifest, SubmitOptions(), SweepState(), {0: trial})
    halting = JobState("sweep-x-t0000", "team-a", "job", 0.0, stage=Stage.RUNNING, halted_by_user=True, attempt=1)
    tracked = Tracked(halting, manifest, MANIFEST, "m.yml")
    shared = cast(Any, SimpleNamespace(jobs={"sweep-x-t0000": tracked}, lock=asyncio.Lock(), wake=asyncio.Event()))
    requeues = _Requeues()
    driver = SweepDriver(
        shared, cast(Any, requeues), cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None)
    )
    driver._store = cast(Any, _Records())

    async def credentials(_sweep: object, _tracked: object) -> None:
        return None

    driver._restore_credentials = credentials  # type: ignore[method-assign]
    asyncio.run(driver._resume(sweep))
    assert sweep.trials[0].rung_attempt == 2, "the halting trial is not marked to resume"
    assert requeues.requeued == [], "requeued before its job halted"
    tracked.state = tracked.state.evolve(stage=Stage.DONE, status=JobStatus.HALTED)
    asyncio.run(driver._finish_actions(sweep))
    assert requeues.requeued == ["sweep-x-t0000"]
