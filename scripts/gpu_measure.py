"""The measurements of `make gpu-check` that need no GPU to run: a training halted and resumed through
`learner-run`, its checkpoint's size and write time, and the cost of `learner-run` and of a sampler beside it,
from runs alternated against the same training run directly. Standard library only; `scripts/gpu_check.py` puts
the GPU requirement on top (`require_gpu`), and tests run all of it on the CPU with a stand-in training script.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
GPU_DEVICES = ("cuda", "gpu")
POLL_S = 0.05
DIRECT, LEARNER_RUN, WITH_SAMPLER = "direct", "learner-run", "learner-run+nvml"
MODES = (DIRECT, LEARNER_RUN, WITH_SAMPLER)
"""The overhead runs of one round, in the order they alternate; `direct` is the baseline."""


@dataclass(frozen=True)
class Training:
    """One framework's training script, run by `python` for `steps` steps with a checkpoint every so many."""

    python: str
    script: Path
    steps: int
    checkpoint_every: int
    timeout_s: float = 900.0


@dataclass(frozen=True)
class Summary:
    """What the training wrote to summary.json."""

    device: str
    start_step: int
    final_step: int
    loss: float
    accuracy: float


@dataclass(frozen=True)
class HaltResume:
    """A training halted once a checkpoint at or past `halt_after` existed, then resumed to its end."""

    halt_after: int
    halted_in_s: float
    """From writing control/halt to learner-run's exit."""
    halted_at: int
    """The latest checkpoint's step after the halt."""
    checkpoint_bytes: int
    checkpoint_files: int
    checkpoint_write_s: list[float]
    """Per checkpoint of the resumed run, its write time as the training saw it (`checkpoint_write_times`)."""
    summary: Summary


def job_folder(scratch: Path) -> dict[str, str]:
    """A /job-like folder holding the smoke dataset, and the variables that point the learner helper at it."""
    folders = {
        "DATA_DIR": "data",
        "MODEL_DIR": "model",
        "RESULT_DIR": "results",
        "CHECKPOINT_DIR": "checkpoints",
        "LOG_DIR": "logs",
        "JOB_STATE_DIR": "control",
    }
    env = {}
    for variable, name in folders.items():
        (scratch / name).mkdir(parents=True, exist_ok=True)
        env[variable] = str(scratch / name)
    smokedata = _load_smokedata()
    smokedata.write_smoke_dataset(Path(env["DATA_DIR"]))
    (scratch / "control" / "start").write_text("")
    return env


@functools.cache
def _load_smokedata() -> ModuleType:
    """build/imagetest/smokedata.py by its file: the learnerkit_build package needs more than this Python may have."""
    spec = importlib.util.spec_from_file_location("smokedata", ROOT / "build" / "imagetest" / "smokedata.py")
    if spec is None or spec.loader is None:
        raise ImportError("cannot load build/imagetest/smokedata.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Started:
    """A training started, its output going to a file (a pipe left unread would stall it)."""

    process: subprocess.Popen[bytes]
    output: Path

    def finish(self, timeout_s: float) -> str:
        """Wait for the training's end (killed past `timeout_s`); its output."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        return self.output.read_text(encoding="utf-8", errors="replace")


def start(
    training: Training, env: Mapping[str, str], output: Path, *, through_learner_run: bool, pace_s: float = 0.0
) -> Started:
    """The training on the job folder `env`, through `learner-run` (the learner image's entrypoint) or directly."""
    command = [training.python, str(training.script), "--steps", str(training.steps)]
    command += ["--checkpoint-every", str(training.checkpoint_every)]
    if through_learner_run:
        command = [training.python, str(ROOT / "learner_base" / "bin" / "learner-run"), *command]
    extra = {"SMOKE_MIN_STEP_SECONDS": str(pace_s)} if pace_s else {}
    full = {**os.environ, **env, **extra, "PYTHONPATH": str(ROOT / "learner_base"), "LEARNER_HALT_GRACE": "60"}
    with output.open("wb") as sink:
        process = subprocess.Popen(command, env=full, stdout=sink, stderr=subprocess.STDOUT)
    return Started(process, output)


def checkpoint_steps(folder: Path) -> list[int]:
    """The steps of the complete checkpoints in `folder` (`ckpt-<step>`; `.tmp-` entries are not complete)."""
    return sorted(int(p.name.split("-", 1)[1]) for p in folder.glob("ckpt-*") if p.name.split("-", 1)[1].isdigit())


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(POLL_S)
    return predicate()


def read_summary(result_dir: Path) -> Summary:
    doc = json.loads((result_dir / "summary.json").read_text())
    return Summary(
        device=str(doc.get("device", "")),
        start_step=int(doc["start_step"]),
        final_step=int(doc["final_step"]),
        loss=float(doc["loss"]),
        accuracy=float(doc["accuracy"]),
    )


def step_times(metrics_lines: Iterable[str]) -> dict[int, float]:
    """Step -> wall time of its line in metrics.jsonl (`learner.log_metrics`); a later line for a step wins."""
    times = {}
    for number, line in enumerate(metrics_lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            times[int(record["step"])] = float(record["time"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"metrics.jsonl line {number}: not a metrics record ({e}): {line[:200]!r}") from None
    return times


def checkpoint_write_times(times: Mapping[int, float], checkpoints: Iterable[int]) -> list[float]:
    """Each checkpoint's write time, as the training saw it: a checkpoint is written after its step's metrics
    line, so the gap to the next step's line is one step plus the checkpoint; the median gap between steps
    without a checkpoint is one step. Checkpoints without a next step's line are left out."""
    saved = {step for step in checkpoints if step in times and step + 1 in times}
    plain = [times[s + 1] - times[s] for s in times if s + 1 in times and s not in saved]
    if not saved or not plain:
        return []
    step_s = statistics.median(plain)
    return [max(0.0, times[s + 1] - times[s] - step_s) for s in sorted(saved)]


def halt_and_resume(training: Training, scratch: Path, halt_after: int, pace_s: float) -> HaltResume:
    """Train through `learner-run`, paced, halt it once a checkpoint at or past step `halt_after` exists, then
    resume it unpaced to the end. RuntimeError, with the training's output, when either part goes wrong."""
    env = job_folder(scratch)
    control, checkpoints, results = (Path(env[v]) for v in ("JOB_STATE_DIR", "CHECKPOINT_DIR", "RESULT_DIR"))
    first = start(training, env, scratch / "first.log", through_learner_run=True, pace_s=pace_s)

    def reached() -> bool:
        return any(step >= halt_after for step in checkpoint_steps(checkpoints)) or first.process.poll() is not None

    wait_for(reached, training.timeout_s)
    asked = time.monotonic()
    (control / "halt").write_text("")
    out = first.finish(training.timeout_s)
    halted_in_s = time.monotonic() - asked
    exit_record = json.loads((control / "learner.exit").read_text())
    steps = checkpoint_steps(checkpoints)
    if exit_record.get("reason") != "halted" or not steps or steps[-1] < halt_after:
        raise RuntimeError(f"halt after checkpoint >= {halt_after}: {exit_record}, checkpoints {steps}\n{out[-1500:]}")
    halted_at = steps[-1]
    sizes = [p.stat().st_size for p in (checkpoints / f"ckpt-{halted_at:010d}").rglob("*") if p.is_file()]
    for name in ("halt", "learner.exit"):
        (control / name).unlink()

    second = start(training, env, scratch / "second.log", through_learner_run=True)
    out = second.finish(training.timeout_s)
    if second.process.returncode != 0 or not (results / "summary.json").exists():
        raise RuntimeError(f"resume: exit {second.process.returncode}\n{out[-1500:]}")
    summary = read_summary(results)
    metrics = (Path(env["LOG_DIR"]) / "metrics.jsonl").read_text().splitlines()
    times = {s: t for s, t in step_times(metrics).items() if s > halted_at}
    saved = [s for s in range(halted_at + 1, summary.final_step) if s % training.checkpoint_every == 0]
    return HaltResume(
        halt_after=halt_after,
        halted_in_s=halted_in_s,
        halted_at=halted_at,
        checkpoint_bytes=sum(sizes),
        checkpoint_files=len(sizes),
        checkpoint_write_s=checkpoint_write_times(times, saved),
        summary=summary,
    )


def require_gpu(device: str) -> None:
    """RuntimeError unless the training said it ran on a GPU (`cuda:0` for PyTorch, `gpu:0` for JAX)."""
    if not device.lower().startswith(GPU_DEVICES):
        raise RuntimeError(f"trained on {device or 'an unnamed device'}, not a GPU")


def require_resumed(run: HaltResume, steps: int) -> None:
    """RuntimeError unless the resumed run went on from the checkpoint after the halt to the last step."""
    start_step, final = run.summary.start_step, run.summary.final_step
    if start_step != run.halted_at + 1 or final != steps:
        raise RuntimeError(f"resumed at {start_step} (want {run.halted_at + 1}), ended at {final} (want {steps})")


def timed_run(training: Training, mode: str, sampler: Callable[[], AbstractContextManager[object]]) -> float:
    """Seconds of one unpaced training from scratch in `mode`, the interpreter's start included; RuntimeError
    when it fails."""
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{mode}-") as scratch:
        env = job_folder(Path(scratch))
        output = Path(scratch) / "output.log"
        with sampler() if mode == WITH_SAMPLER else nullcontext():
            began = time.monotonic()
            run = start(training, env, output, through_learner_run=mode != DIRECT)
            out = run.finish(training.timeout_s)
            seconds = time.monotonic() - began
        if run.process.returncode != 0:
            raise RuntimeError(f"{mode} run: exit {run.process.returncode}\n{out[-1500:]}")
        require_gpu(read_summary(Path(env["RESULT_DIR"])).device)
        return seconds


def alternate(rounds: int, run: Callable[[str], float]) -> dict[str, list[float]]:
    """`run(mode)` for every mode in turn, `rounds` times over (direct, learner-run, learner-run+nvml, direct,
    ...), so a machine's drift over the minutes falls on all modes alike. Mode -> its times, in order."""
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            times[mode].append(run(mode))
    return times


def best_ratios(times: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each mode's best time over the baseline's best (the direct run): below 1.0 is faster, within noise."""
    baseline = min(times[DIRECT])
    if baseline <= 0:
        raise ValueError(f"direct runs took {baseline} s: nothing to compare with")
    return {mode: min(values) / baseline for mode, values in times.items() if mode != DIRECT}


def halt_line(framework: str, steps: int, run: HaltResume) -> str:
    """The job-sized run in one line, to compare with docs/gpu.md."""
    return (
        f"job-sized {framework}: {steps} steps, halt asked once a checkpoint >= {run.halt_after} existed; "
        f"exited halted in {run.halted_in_s:.2f} s at checkpoint {run.halted_at}, resumed at "
        f"{run.summary.start_step}, finished {run.summary.final_step} on {run.summary.device}"
    )


def checkpoint_line(framework: str, run: HaltResume) -> str:
    files = "file" if run.checkpoint_files == 1 else "files"
    if run.checkpoint_write_s:
        written = (
            f"written in {statistics.median(run.checkpoint_write_s) * 1000:.1f} ms "
            f"(median of {len(run.checkpoint_write_s)}, from the step times in metrics.jsonl)"
        )
    else:
        written = "write time not measured: no checkpoint between two logged steps of the resumed run"
    return f"checkpoint {framework}: {run.checkpoint_bytes} bytes in {run.checkpoint_files} {files}; {written}"


def overhead_line(framework: str, steps: int, times: Mapping[str, Sequence[float]]) -> str:
    ratios = best_ratios(times)
    rounds = len(times[DIRECT])
    plural = "round" if rounds == 1 else "rounds"
    return (
        f"overhead {framework}: {LEARNER_RUN} {ratios[LEARNER_RUN]:.2f}, {WITH_SAMPLER} {ratios[WITH_SAMPLER]:.2f} "
        f"of direct (best of {rounds} alternated {plural} of {steps} steps; direct best {min(times[DIRECT]):.2f} s)"
    )
