"""The `learner` helper that training scripts import: paths, metrics, halt, checkpoints."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest

import learner
from learner.checkpoints import checkpoint_name

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def job_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for variable, name in [("LOG_DIR", "logs"), ("CHECKPOINT_DIR", "ckpt"), ("JOB_STATE_DIR", "control")]:
        monkeypatch.setenv(variable, str(tmp_path / name))
    return tmp_path


# --- paths --------------------------------------------------------------------------------------------


def test_paths_default_to_job_and_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("DATA_DIR", "MODEL_DIR", "RESULT_DIR", "CHECKPOINT_DIR", "LOG_DIR", "JOB_STATE_DIR"):
        monkeypatch.delenv(variable, raising=False)
    assert [learner.data_dir(), learner.model_dir(), learner.result_dir()] == [
        Path("/job/data"),
        Path("/job/model"),
        Path("/job/results"),
    ]
    assert [learner.checkpoint_dir(), learner.log_dir(), learner.state_dir()] == [
        Path("/job/checkpoints"),
        Path("/job/logs"),
        Path("/job/control"),
    ]
    monkeypatch.setenv("DATA_DIR", "/mnt/data")
    monkeypatch.setenv("RESULT_DIR", "")
    assert learner.data_dir() == Path("/mnt/data")
    assert learner.result_dir() == Path("/job/results")


# --- metrics ------------------------------------------------------------------------------------------


def test_log_metrics_appends_one_json_line_per_call(job_dirs: Path) -> None:
    before = time.time()
    learner.log_metrics(40, loss=0.25, accuracy=Fraction(1, 2), correct=7)  # type: ignore[arg-type]
    learner.log_metrics(41, loss=0.125)
    lines = (job_dirs / "logs" / "metrics.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    first, second = (json.loads(line) for line in lines[:2])
    assert set(first) == {"step", "time", "values"}
    assert first["step"] == 40 and first["values"] == {"loss": 0.25, "accuracy": 0.5, "correct": 7}
    assert before <= first["time"] <= second["time"] <= time.time()
    assert second == {"step": 41, "time": second["time"], "values": {"loss": 0.125}}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "0.5", None, True, [1.0]])
def test_log_metrics_rejects_non_finite_and_non_numeric(job_dirs: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="'loss'"):
        learner.log_metrics(1, ok=1.0, loss=bad)  # type: ignore[arg-type]
    assert not (job_dirs / "logs" / "metrics.jsonl").exists()


@pytest.mark.parametrize("step", [-1, 1.5, True])
def test_log_metrics_rejects_bad_steps(step: object) -> None:
    with pytest.raises(ValueError, match="step"):
        learner.log_metrics(step, loss=1.0)  # type: ignore[arg-type]


# --- checkpoints --------------------------------------------------------------------------------------


def save(step: int, keep: int = 3, payload: bytes = b"weights") -> Path:
    with learner.new_checkpoint(step, keep=keep) as path:
        assert path.is_dir() and path.name.startswith(".tmp-") and path.parent == learner.checkpoint_dir()
        assert list(path.iterdir()) == []
        (path / "model.bin").write_bytes(payload)
        (path / "sub").mkdir()
        (path / "sub" / "opt.bin").write_bytes(payload)
    return learner.checkpoint_dir() / checkpoint_name(step)


def entries() -> list[str]:
    return sorted(p.name for p in learner.checkpoint_dir().iterdir())


def test_new_checkpoint_renames_into_place() -> None:
    final = save(40)
    assert final.name == "ckpt-0000000040"
    assert entries() == ["ckpt-0000000040"]
    assert (final / "model.bin").read_bytes() == b"weights"
    assert (final / "sub" / "opt.bin").read_bytes() == b"weights"
    assert learner.latest_checkpoint() == learner.Checkpoint(step=40, path=final)
    assert final.stat().st_mode & 0o777 == 0o775  # the sidecar, another UID in group 0, reads it


def test_latest_checkpoint_is_none_without_any() -> None:
    assert learner.latest_checkpoint() is None
    learner.checkpoint_dir().mkdir()
    assert learner.latest_checkpoint() is None


def test_latest_picks_the_highest_step_and_ignores_temp_entries() -> None:
    for step in (100, 5, 40):
        save(step, keep=10)
    (learner.checkpoint_dir() / ".tmp-ckpt-0000009999-abc").mkdir()
    (learner.checkpoint_dir() / "ckpt-12").mkdir()  # not zero-padded: not a checkpoint
    (learner.checkpoint_dir() / "notes.txt").write_text("x")
    latest = learner.latest_checkpoint()
    assert latest is not None and latest.step == 100 and latest.path.name == "ckpt-0000000100"


def test_keep_prunes_older_checkpoints() -> None:
    for step in range(1, 6):
        save(step * 10, keep=2)
    assert entries() == ["ckpt-0000000040", "ckpt-0000000050"]


def test_same_step_is_replaced() -> None:
    save(7, payload=b"old")
    final = save(7, payload=b"new")
    assert entries() == ["ckpt-0000000007"]
    assert (final / "model.bin").read_bytes() == b"new"


def test_exception_removes_the_temp_dir_and_keeps_the_previous_checkpoint() -> None:
    save(1)
    with pytest.raises(RuntimeError, match="disk on fire"), learner.new_checkpoint(2) as path:
        (path / "half.bin").write_bytes(b"half")
        raise RuntimeError("disk on fire")
    assert not path.exists()
    assert entries() == ["ckpt-0000000001"]
    latest = learner.latest_checkpoint()
    assert latest is not None and latest.step == 1


def test_an_interrupt_while_writing_removes_the_temp_dir_too() -> None:
    """A halt's SIGINT arrives as KeyboardInterrupt, which is no Exception: the half-written folder goes anyway."""
    save(1)
    with pytest.raises(KeyboardInterrupt), learner.new_checkpoint(2) as path:
        (path / "half.bin").write_bytes(b"half")
        raise KeyboardInterrupt
    assert not path.exists()
    assert entries() == ["ckpt-0000000001"]


@pytest.mark.parametrize(("step", "keep"), [(-1, 3), (1, 0)])
def test_new_checkpoint_rejects_bad_arguments(step: int, keep: int) -> None:
    with pytest.raises(ValueError, match=r"step|keep"), learner.new_checkpoint(step, keep=keep):
        pass


# --- halt ---------------------------------------------------------------------------------------------


def test_halt_requested_by_file(job_dirs: Path) -> None:
    assert not learner.halt_requested()
    (job_dirs / "control").mkdir()
    (job_dirs / "control" / "halt").touch()
    assert learner.halt_requested()


HALT_SCRIPT = """
import sys, time
import learner
learner.install_halt_handler()
print("ready", flush=True)
deadline = time.monotonic() + 10
while not learner.halt_requested():
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.005)
print("halted", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_halt_requested_by_signal(job_dirs: Path, signum: signal.Signals) -> None:
    env = {"PYTHONPATH": str(REPO / "learner_base"), "JOB_STATE_DIR": str(job_dirs / "control")}
    proc = subprocess.Popen([sys.executable, "-c", HALT_SCRIPT], stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=10)
    assert (proc.returncode, out) == (0, "halted\n")


# --- a sweep trial's budget -----------------------------------------------------------------------------


def test_budget_is_none_outside_a_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEARNER_BUDGET", raising=False)
    assert learner.budget() is None


def test_budget_reads_the_limit_and_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEARNER_BUDGET", "30")
    monkeypatch.setenv("LEARNER_BUDGET_UNIT", "epoch")
    limit = learner.budget()
    assert limit == learner.Budget(30, "epoch")
    assert limit is not None and not limit.reached(29) and limit.reached(30)
    monkeypatch.delenv("LEARNER_BUDGET_UNIT")
    assert learner.budget() == learner.Budget(30, "step")


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LEARNER_BUDGET", "2.5", "LEARNER_BUDGET must be a whole number of at least 1, got '2.5'"),
        ("LEARNER_BUDGET", "0", "LEARNER_BUDGET must be a whole number of at least 1, got '0'"),
        ("LEARNER_BUDGET_UNIT", "second", "LEARNER_BUDGET_UNIT must be one of step, epoch, got 'second'"),
    ],
)
def test_a_bad_budget_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv("LEARNER_BUDGET", "10")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=message):
        learner.budget()


def test_parameters_come_as_one_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEARNER_PARAMETERS", raising=False)
    assert learner.parameters() == {}
    monkeypatch.setenv("LEARNER_PARAMETERS", '{"lr": 0.01, "width": 32}')
    assert learner.parameters() == {"lr": 0.01, "width": 32}
    monkeypatch.setenv("LEARNER_PARAMETERS", "[1]")
    with pytest.raises(ValueError, match="LEARNER_PARAMETERS must be a JSON object, got list"):
        learner.parameters()


# --- a halt at the rung's budget ------------------------------------------------------------------------

HALT_ONLY = """
import json, sys
import learner

learner.install_halt_handler()
ckpt = learner.latest_checkpoint()
step = ckpt.step if ckpt else 0
while step < 1000 and not learner.halt_requested():  # honours halts; never reads learner.budget()
    step += 1
    learner.log_metrics(step, loss=1.0 / step)
with learner.new_checkpoint(step) as path:
    (path / "step").write_text(str(step))
print(step)
"""


def run_trial(job_dirs: Path, code: str, budget: str | None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PYTHONPATH": str(REPO / "learner_base"),
        **{
            v: str(job_dirs / n)
            for v, n in [("LOG_DIR", "logs"), ("CHECKPOINT_DIR", "ckpt"), ("JOB_STATE_DIR", "control")]
        },
        **({"LEARNER_BUDGET": budget} if budget else {}),
        **extra,
    }
    (job_dirs / "control").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=20, check=False
    )


def logged_steps(job_dirs: Path) -> list[int]:
    lines = (job_dirs / "logs" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def test_a_halt_only_script_stops_and_checkpoints_at_each_rung_s_budget_exactly(job_dirs: Path) -> None:
    first = run_trial(job_dirs, HALT_ONLY, "10")
    assert (first.returncode, first.stdout, first.stderr) == (0, "10\n", "")
    assert json.loads((job_dirs / "control" / "budget.reached").read_text()) == {"budget": 10, "step": 10}
    (job_dirs / "control" / "budget.reached").unlink()  # learner-run removes it before the next run starts
    promoted = run_trial(job_dirs, HALT_ONLY, "30")  # resumed from its checkpoint with the next rung's budget
    assert (promoted.returncode, promoted.stdout) == (0, "30\n")
    assert logged_steps(job_dirs) == list(range(1, 31))  # each step once, none past a rung
    assert [c.step for c in [learner.latest_checkpoint()] if c] == [30]


def test_outside_a_sweep_logging_never_halts(job_dirs: Path) -> None:
    done = run_trial(job_dirs, HALT_ONLY, None)
    assert (done.returncode, done.stdout) == (0, "1000\n")
    assert not (job_dirs / "control" / "budget.reached").exists()


OWN_HANDLER = """
import signal, sys
import learner

def on_halt(signum, frame):
    print(f"halt {signal.Signals(signum).name} after step {step}", flush=True)
    sys.exit(0)

signal.signal(signal.SIGUSR1, on_halt)  # the script's own handler; it never calls halt_requested()
step = 0
while step < 1000:
    step += 1
    learner.log_metrics(step, loss=1.0)
sys.exit(5)
"""


def test_the_script_s_own_handler_for_the_halt_signal_fires_at_the_budget(job_dirs: Path) -> None:
    done = run_trial(job_dirs, OWN_HANDLER, "7", LEARNER_HALT_SIGNAL="usr1")
    assert (done.returncode, done.stdout) == (0, "halt SIGUSR1 after step 7\n")
    assert logged_steps(job_dirs) == list(range(1, 8))


NO_HANDLER = """
import learner
for step in range(1, 21):
    learner.log_metrics(step, loss=1.0)
print(learner.halt_requested())
"""


def test_without_a_handler_the_halt_signal_is_not_raised_and_the_script_goes_on(job_dirs: Path) -> None:
    done = run_trial(job_dirs, NO_HANDLER, "5")  # SIGTERM's default would end it before any checkpoint
    assert (done.returncode, done.stdout) == (0, "True\n")
    assert logged_steps(job_dirs) == list(range(1, 21))
    assert json.loads((job_dirs / "control" / "budget.reached").read_text()) == {"budget": 5, "step": 5}


def test_another_process_of_the_command_sees_the_budget_halt(job_dirs: Path) -> None:
    assert not learner.halt_requested()
    run_trial(job_dirs, NO_HANDLER, "5")  # the process that logs; this one (a worker, say) only polls
    assert learner.halt_requested()


def test_a_bad_budget_refuses_the_line_before_writing_it(job_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEARNER_BUDGET", "ten")
    with pytest.raises(ValueError, match="LEARNER_BUDGET must be a whole number of at least 1, got 'ten'"):
        learner.log_metrics(1, loss=0.5)
    assert not (job_dirs / "logs" / "metrics.jsonl").exists()
