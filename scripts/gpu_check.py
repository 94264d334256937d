"""The learner side on a GPU machine, outside containers (`scripts/gpu-check.sh`, `make gpu-check`).

For every framework whose Python package is installed in this Python, through `learner-run` and the `learner`
helper of this checkout, on job folders of its own (scripts/gpu_measure.py):
- the smoke run: its smoke script for 60 steps, halted after the first checkpoint and resumed to the end;
- the job-sized run: 3,000 steps, halted once a checkpoint at or past step 1,500 exists, resumed to the end,
  with the halt's latency and the checkpoint's size and write time;
- the overhead: the same training unpaced, directly, through `learner-run`, and through `learner-run` with the
  NVML sampler beside it, alternated; each one's best time as a ratio of the direct run's.
Every run must say in summary.json that it trained on a GPU. Meanwhile the sidecar's NVML sampling
(controller_sidecar.resources, over pynvml from nvidia-ml-py) reads the utilisation and memory of every GPU.
Standard library only, besides the frameworks and pynvml. Exit status 1 when a check fails; a framework that is
not installed is skipped and said so.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType

import gpu_measure
from gpu_measure import ROOT, Training

MODULES = {"caffe": "caffe", "jax": "jax", "mxnet": "mxnet", "pytorch": "torch", "tensorflow": "tensorflow"}
"""Framework folder -> the module its smoke script imports."""
SMOKE_STEPS, SMOKE_EVERY, SMOKE_PACE_S = 60, 10, 0.2
JOB_STEPS, JOB_EVERY, JOB_HALT_AFTER, JOB_PACE_S = 3000, 500, 1500, 0.003
"""The job-sized run: paced so that the halt lands in the middle; its resumed part and the overhead runs are not."""


def load_module(name: str, path: Path) -> ModuleType:
    """A stdlib-only module of this checkout by its file (its package may need more than this Python has)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


NO_NVML = "no NVML: install nvidia-ml-py (the sidecar image's pin) on a host with the NVIDIA driver"


def sidecar_resources() -> ModuleType:
    """The sidecar's resource sampling (controller_sidecar/resources.py): its GPU part is NVML's only."""
    return load_module("resources", ROOT / "controller_sidecar" / "resources.py")


@dataclass
class Peaks:
    """The highest utilisation and memory seen per GPU, over every sampler that ran."""

    utilisation: dict[int, float] = field(default_factory=dict)
    memory_mib: dict[int, float] = field(default_factory=dict)
    error: str | None = None


@dataclass
class GpuSampler:
    """The sidecar's NVML sampling in a thread, every half second while open: utilisation (its own function)
    and memory per GPU, into `peaks`."""

    peaks: Peaks
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            self._sample()
        except Exception as e:  # noqa: BLE001 - a failing sampler is reported, not lost in its thread
            self.peaks.error = f"sampling failed: {type(e).__name__}: {e}"

    def _sample(self) -> None:
        resources = sidecar_resources()
        if resources.gpu_utilisation() is None:
            self.peaks.error = NO_NVML
            return
        import pynvml  # there: gpu_utilisation() answered through it

        peaks = self.peaks
        while not self._stop.wait(0.5):
            for index, value in enumerate(resources.gpu_utilisation() or []):
                peaks.utilisation[index] = max(peaks.utilisation.get(index, 0.0), value)
                memory = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
                peaks.memory_mib[index] = max(peaks.memory_mib.get(index, 0.0), memory.used / 2**20)


def smoke_script(framework: str) -> Path:
    return ROOT / "frameworks" / framework / "smoke" / "train.py"


def smoke(python: str, framework: str, scratch: Path) -> str:
    """The smoke run: halted after its first checkpoint, resumed to the end, on a GPU."""
    training = Training(python, smoke_script(framework), SMOKE_STEPS, SMOKE_EVERY)
    run = gpu_measure.halt_and_resume(training, scratch, SMOKE_EVERY, SMOKE_PACE_S)
    gpu_measure.require_gpu(run.summary.device)
    gpu_measure.require_resumed(run, SMOKE_STEPS)
    summary = run.summary
    return (
        f"on {summary.device}: halted at step {run.halted_at}, resumed at {summary.start_step}, finished "
        f"{summary.final_step}; loss {summary.loss:.4f}, accuracy {summary.accuracy:.3f}"
    )


def job_sized(python: str, framework: str, scratch: Path) -> list[str]:
    """The job-sized run: halted in the middle, resumed to the end, on a GPU; its lines."""
    training = Training(python, smoke_script(framework), JOB_STEPS, JOB_EVERY)
    run = gpu_measure.halt_and_resume(training, scratch, JOB_HALT_AFTER, JOB_PACE_S)
    gpu_measure.require_gpu(run.summary.device)
    gpu_measure.require_resumed(run, JOB_STEPS)
    return [gpu_measure.halt_line(framework, JOB_STEPS, run), gpu_measure.checkpoint_line(framework, run)]


def overhead(python: str, framework: str, rounds: int, peaks: Peaks) -> str:
    """The overhead runs, alternated, with no sampler beside them but the one of the `+nvml` runs; its line."""
    training = Training(python, smoke_script(framework), JOB_STEPS, JOB_EVERY)
    times = gpu_measure.alternate(rounds, lambda mode: gpu_measure.timed_run(training, mode, lambda: GpuSampler(peaks)))
    return gpu_measure.overhead_line(framework, JOB_STEPS, times)


def installed(python: str, module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([python, "-c", probe], check=False).returncode == 0


def check(python: str, framework: str, rounds: int, peaks: Peaks) -> bool:
    """One framework's smoke, job-sized and overhead runs, printed as they end; whether all passed. The NVML
    sampler runs beside the first two and the `+nvml` overhead runs, never beside the others."""
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{framework}-") as scratch:
        try:
            with GpuSampler(peaks):
                print(f"pass {framework}: {smoke(python, framework, Path(scratch) / 'smoke')}", flush=True)
                for line in job_sized(python, framework, Path(scratch) / "job"):
                    print(line, flush=True)
            print(overhead(python, framework, rounds, peaks), flush=True)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"FAIL {framework}: {e}", flush=True)
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("frameworks", nargs="*", help=f"only these (default: all of {', '.join(MODULES)})")
    parser.add_argument("--python", default=sys.executable, help="the Python whose frameworks to use")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds of the overhead runs (default 3)")
    args = parser.parse_args()
    unknown = sorted(set(args.frameworks) - set(MODULES))
    if unknown:
        parser.error(f"unknown framework {', '.join(unknown)}: choose from {', '.join(MODULES)}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    peaks = Peaks(error=NO_NVML if sidecar_resources().gpu_utilisation() is None else None)
    failed = False
    for framework in args.frameworks or list(MODULES):
        if not installed(args.python, MODULES[framework]):
            print(f"skip {framework}: {MODULES[framework]} is not installed in {args.python}", flush=True)
            continue
        failed |= not check(args.python, framework, args.rounds, peaks)
    if peaks.error:
        print(f"FAIL nvml: {peaks.error}")
        return 1
    for index in sorted(peaks.memory_mib):
        utilisation, memory = peaks.utilisation.get(index, 0.0), peaks.memory_mib[index]
        print(f"nvml gpu {index}: peak utilisation {utilisation:.0%}, peak memory used {memory:.0f} MiB")
    if not peaks.memory_mib:
        print("FAIL nvml: NVML answered but counted no GPU")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
