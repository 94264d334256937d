"""Scheduling the matrix with fake builds (no engine): longest first, at most `jobs` at once, durations kept."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from learnerkit_build.builds import schedule
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.builds.images import BuildResult
from learnerkit_build.builds.schedule import (
    DEFAULT_BUILD_S,
    default_jobs,
    expected_seconds,
    longest_first,
    record_durations,
    recorded_durations,
    run_at_most,
)
from learnerkit_build.cli_options import run_builds
from learnerkit_build.progress import build_log_path
from learnerkit_build.views import estimate_line

WAIT_S = 10.0


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_longest_first_with_a_default_for_images_never_built() -> None:
    durations = {"caffe:1.0-cuda": 1012.0, "jax:0.9-cpu": 72.0, "mxnet:1.9.1-cuda": 242.0}
    names = ["jax:0.9-cpu", "new:1.0-cpu", "mxnet:1.9.1-cuda", "other:1.0-cpu", "caffe:1.0-cuda"]
    # Unknown images count as DEFAULT_BUILD_S (300 s): after caffe, before mxnet; equal ones keep their order.
    assert longest_first(names, durations) == [
        "caffe:1.0-cuda",
        "new:1.0-cpu",
        "other:1.0-cpu",
        "mxnet:1.9.1-cuda",
        "jax:0.9-cpu",
    ]
    assert DEFAULT_BUILD_S == 300.0


def test_durations_are_kept_across_runs() -> None:
    assert recorded_durations() == {}
    record_durations({"a": 10.04})
    record_durations({"b": 20.0})
    record_durations({})
    assert recorded_durations() == {"a": 10.0, "b": 20.0}


class Gate:
    """Fake builds that finish only when the test opens their gate, recording what runs together."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running: set[str] = set()
        self.most = 0
        self.guard = threading.Lock()
        self.gates: dict[str, threading.Event] = {}
        self.changed = threading.Condition(self.guard)

    def build(self, name: str, fail: bool = False) -> Callable[[], str]:
        self.gates[name] = threading.Event()

        def run() -> str:
            with self.guard:
                self.started.append(name)
                self.running.add(name)
                self.most = max(self.most, len(self.running))
                self.changed.notify_all()
            assert self.gates[name].wait(WAIT_S), f"{name} never released"
            with self.guard:
                self.running.discard(name)
                self.changed.notify_all()
            if fail:
                raise RuntimeError(f"{name} failed")
            return f"{name} built"

        return run

    def wait_running(self, *names: str) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: set(names) <= self.running, timeout=WAIT_S), self.running


def run_in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(target())
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_at_most_jobs_at_once_and_the_next_starts_when_one_ends() -> None:
    gate = Gate()
    tasks = [(name, gate.build(name)) for name in ("long", "middle", "short")]
    thread, outcome = run_in_thread(lambda: run_at_most(tasks, 2))

    gate.wait_running("long", "middle")
    assert gate.started == ["long", "middle"]  # short waits for a free slot
    gate.gates["middle"].set()
    gate.wait_running("long", "short")
    gate.gates["long"].set()
    gate.gates["short"].set()
    thread.join(WAIT_S)

    assert outcome == [{"long": "long built", "middle": "middle built", "short": "short built"}]
    assert gate.most == 2


def test_after_a_failure_nothing_new_starts_and_the_running_ones_finish() -> None:
    gate = Gate()
    tasks = [("a", gate.build("a", fail=True)), ("b", gate.build("b")), ("c", gate.build("c"))]
    thread, outcome = run_in_thread(lambda: run_at_most(tasks, 2))

    gate.wait_running("a", "b")
    gate.gates["a"].set()
    with gate.changed:
        assert gate.changed.wait_for(lambda: "a" not in gate.running, timeout=WAIT_S)
    gate.gates["b"].set()
    thread.join(WAIT_S)

    assert gate.started == ["a", "b"]
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError) and str(outcome[0]) == "a failed"


def test_one_job_runs_them_in_the_calling_thread_where_a_ctrl_c_reaches_them() -> None:
    threads: list[threading.Thread] = []

    def build() -> str:
        threads.append(threading.current_thread())
        return "built"

    assert run_at_most([("x", build), ("y", build)], 1) == {"x": "built", "y": "built"}
    assert threads == [threading.current_thread()] * 2


def test_an_interrupt_while_builds_run_in_other_threads_stops_them_and_starts_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate()
    tasks = [(name, gate.build(name)) for name in ("a", "b", "c")]

    def interrupted(*_args: object, **_kwargs: object) -> object:
        gate.wait_running("a", "b")
        raise KeyboardInterrupt

    def stop() -> None:
        stopped.append(sorted(gate.running))
        for event in gate.gates.values():
            event.set()

    stopped: list[list[str]] = []
    monkeypatch.setattr(schedule, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_at_most(tasks, 2, on_interrupt=stop)
    assert stopped == [["a", "b"]]
    assert gate.started == ["a", "b"]


def test_one_job_runs_them_one_after_the_other() -> None:
    gate = Gate()
    tasks = [(name, gate.build(name)) for name in ("x", "y")]
    for event in gate.gates.values():
        event.set()
    assert run_at_most(tasks, 1) == {"x": "x built", "y": "y built"}
    assert gate.most == 1
    with pytest.raises(ValueError, match="--jobs 0"):
        run_at_most(tasks, 0)


def test_default_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEARNERKIT_BUILD_JOBS", raising=False)
    assert default_jobs() == 2  # two at once: measured cold on 2 cores (docs/build-tool.md, "Builds at once")
    monkeypatch.setenv("LEARNERKIT_BUILD_JOBS", "3")
    assert default_jobs() == 3
    monkeypatch.setenv("LEARNERKIT_BUILD_JOBS", "none")
    with pytest.raises(Exception, match="LEARNERKIT_BUILD_JOBS='none'"):
        default_jobs()


def fake_build(name: str, status: str, seconds: float, started: list[str]) -> Callable[[LogSink], BuildResult]:
    def build(on_line: LogSink) -> BuildResult:
        started.append(name)
        for n in range(3):
            on_line(f"{name} line {n}")
        return BuildResult(spec=name, status=status, reference=f"learnerkit/{name}", seconds=seconds)  # type: ignore[arg-type]

    return build


def test_run_builds_orders_by_recorded_durations_and_keeps_a_log_per_image(
    capsys: pytest.CaptureFixture[str],
) -> None:
    record_durations({"slow:1-cpu": 900.0, "quick:1-cpu": 30.0})
    started: list[str] = []
    cached = BuildResult(spec="cached:1-cpu", status="cached", reference="learnerkit/cached", seconds=0.1)
    planned = [
        ("quick:1-cpu", fake_build("quick:1-cpu", "built", 31.0, started)),
        ("cached:1-cpu", cached),
        ("new:1-cpu", fake_build("new:1-cpu", "built", 40.0, started)),
        ("slow:1-cpu", fake_build("slow:1-cpu", "built", 950.0, started)),
    ]

    run_builds(planned, output="json", quiet_log=True, jobs=1)

    assert started == ["slow:1-cpu", "new:1-cpu", "quick:1-cpu"]  # new: unknown, so the 300 s default
    emitted = json.loads(capsys.readouterr().out)
    assert [r["spec"] for r in emitted["images"]] == ["quick:1-cpu", "cached:1-cpu", "new:1-cpu", "slow:1-cpu"]
    assert emitted["images"][1]["status"] == "cached" and emitted["fill"] is None  # nothing built, nothing filled
    # Only real builds update the record: a cached one says nothing about what a build costs.
    assert recorded_durations() == {"slow:1-cpu": 950.0, "quick:1-cpu": 31.0, "new:1-cpu": 40.0}
    assert build_log_path("slow:1-cpu").read_text(encoding="utf-8") == "".join(
        f"slow:1-cpu line {n}\n" for n in range(3)
    )
    assert build_log_path("slow:1-cpu").name == "slow_1-cpu.log"


def test_the_expected_seconds_follow_the_slots_and_the_estimate_names_each_image() -> None:
    durations = {"slow:1-cpu": 900.0, "quick:1-cpu": 30.0}
    names = ["slow:1-cpu", "new:1-cpu", "quick:1-cpu"]
    assert expected_seconds(names, durations, jobs=1) == 900.0 + DEFAULT_BUILD_S + 30.0
    assert expected_seconds(names, durations, jobs=2) == 900.0  # new then quick on the second slot: 330 s
    line = estimate_line(names, durations, jobs=1)
    assert line.startswith("to build: slow:1-cpu 15 min 0 s, new:1-cpu ~5 min 0 s, quick:1-cpu 30 s;")
    assert line.endswith(
        "about 20 min 30 s in all (each image's last build here; ~: never built here, 5 min 0 s assumed)"
    )
    assert estimate_line(["quick:1-cpu"], durations, jobs=1).endswith("(each image's last build here)")
    fresh = estimate_line(["new:1-cpu"], durations, jobs=1)
    assert fresh.endswith("about 5 min 0 s in all (none built here before: 5 min 0 s each assumed)"), fresh
