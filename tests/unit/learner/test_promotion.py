"""`learner.next_budget`: a trial at its rung's budget asks for the next one and trains on in the same process when
promoted in place; unanswered within its wait, or halted, it ends its rung as before. The test plays the sidecar's
part on the control files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import learner
from controller_sidecar.promotion import answer
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[3]

TRIAL = """
import os
import learner

learner.install_halt_handler()   # the helper's halt at the budget sets its flag: a promotion takes it back
limit = learner.budget()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
while not limit.reached(step):
    step += 1
    learner.log_metrics(step, loss=1.0 / step)
    if limit.reached(step):
        assert learner.halt_requested()
        limit = learner.next_budget(step) or limit
        print("at", step, "budget", limit.limit, "halt", learner.halt_requested(), flush=True)
with learner.new_checkpoint(step) as path:
    (path / "step").write_text(str(step))
print("pid", os.getpid(), "ended at", step)
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "control").mkdir()
    return tmp_path


def start_trial(job: Path, budget: str, **extra: str) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO / "learner_base"),
        "LOG_DIR": str(job / "logs"),
        "CHECKPOINT_DIR": str(job / "ckpt"),
        "JOB_STATE_DIR": str(job / "control"),
        "LEARNER_BUDGET": budget,
        **extra,
    }
    return subprocess.Popen(
        [sys.executable, "-c", TRIAL], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def sidecar(job: Path, answers: dict[int, int | None], seen: list[dict[str, object]]) -> threading.Thread:
    """Answers each request for the next budget (by its step) as ``answers`` say, with the sidecar's writer."""

    def run() -> None:
        control = job / "control"
        for step, budget in answers.items():

            def asked(step: int = step) -> dict[str, object] | None:
                try:
                    found = json.loads((control / "budget.wait").read_text())
                except (FileNotFoundError, ValueError):
                    return None
                return found if isinstance(found, dict) and found.get("step") == step else None

            seen.append(wait_until(asked, timeout=20, interval=0.01, message=f"a request at step {step}"))
            answer(control, step, budget)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def logged_steps(job: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (job / "logs" / "metrics.jsonl").read_text().splitlines()]


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (0, ""), err
    return out


def test_promoted_in_place_the_same_process_trains_on_each_step_once(job: Path) -> None:
    seen: list[dict[str, object]] = []
    answering = sidecar(job, {3: 9, 9: None}, seen)
    process = start_trial(job, "3")
    out = finish(process)
    answering.join(5)
    assert out.splitlines() == [
        "at 3 budget 9 halt False",  # promoted: no halt left, the new budget
        "at 9 budget 9 halt True",  # not promoted: it ends its rung as before
        f"pid {process.pid} ended at 9",
    ]
    assert logged_steps(job) == list(range(1, 10))
    assert seen == [
        {"step": 3, "budget": 3, "metrics": {"loss": [3, 1.0 / 3]}},
        {"step": 9, "budget": 9, "metrics": {"loss": [9, 1.0 / 9]}},
    ]
    control = sorted(p.name for p in (job / "control").iterdir())
    assert control == ["budget.reached"]  # the request and the answer are gone; the last rung's halt stays


def test_unanswered_within_its_wait_it_checkpoints_at_the_budget(job: Path) -> None:
    started = time.monotonic()
    out = finish(start_trial(job, "4", LEARNER_PROMOTION_WAIT="0.5"))
    assert time.monotonic() - started >= 0.5
    assert out.splitlines()[0] == "at 4 budget 4 halt True"
    assert logged_steps(job) == [1, 2, 3, 4]
    assert [c.name for c in (job / "ckpt").iterdir()] == ["ckpt-0000000004"]
    assert not (job / "control" / "budget.wait").exists()


def test_a_halt_while_it_waits_ends_the_wait_at_once(job: Path) -> None:
    process = start_trial(job, "2", LEARNER_PROMOTION_WAIT="25")
    wait_until(lambda: (job / "control" / "budget.wait").exists(), timeout=20, interval=0.01, message="the request")
    started = time.monotonic()
    (job / "control" / "halt").write_text("")
    out = finish(process)
    assert time.monotonic() - started < 10  # not the 25 s wait
    assert out.splitlines()[0] == "at 2 budget 2 halt True"


def test_a_halt_signal_while_it_waits_is_not_taken_back_by_a_promotion(job: Path) -> None:
    process = start_trial(job, "2", LEARNER_PROMOTION_WAIT="25")
    wait_until(lambda: (job / "control" / "budget.wait").exists(), timeout=20, interval=0.01, message="the request")
    process.terminate()  # the halt signal, as learner-run sends it
    out = finish(process)
    assert out.splitlines()[0] == "at 2 budget 2 halt True"


@pytest.fixture
def in_sweep(job: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    monkeypatch.setenv("JOB_STATE_DIR", str(job / "control"))
    monkeypatch.setenv("LOG_DIR", str(job / "logs"))

    def budget(value: str) -> None:
        monkeypatch.setenv("LEARNER_BUDGET", value)

    return budget


def test_outside_a_sweep_there_is_no_next_budget(
    in_sweep: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEARNER_BUDGET", raising=False)
    assert learner.next_budget(5) is None


def test_asking_before_the_budget_is_an_error(in_sweep: Callable[[str], None]) -> None:
    in_sweep("10")
    with pytest.raises(ValueError, match=r"next_budget\(4\): this rung's budget \(10 steps\) is not reached"):
        learner.next_budget(4)


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_a_bad_wait_names_its_variable(
    in_sweep: Callable[[str], None], monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    in_sweep("10")
    monkeypatch.setenv("LEARNER_PROMOTION_WAIT", raw)
    with pytest.raises(
        ValueError, match=f"LEARNER_PROMOTION_WAIT must be a non-negative number of seconds, got '{raw}'"
    ):
        learner.next_budget(10)


def test_a_wait_of_zero_asks_nothing(in_sweep: Callable[[str], None], job: Path) -> None:
    in_sweep("10")
    assert learner.next_budget(10, wait_s=0) is None
    assert not (job / "control" / "budget.wait").exists()
