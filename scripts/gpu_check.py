"""The learner side on a GPU machine, outside containers (`scripts/gpu-check.sh`, `make gpu-check`).

For every framework whose Python package is installed in this Python: `learner-run` runs the framework's smoke
script (with the `learner` helper of this checkout) on a job folder of its own, halts it after the first
checkpoint, resumes it to the end, and the script must report in summary.json that it trained on a GPU.
Meanwhile the sidecar's NVML sampling (controller_sidecar.resources, over pynvml from nvidia-ml-py) reads the
utilisation and memory of every GPU. Standard library only, besides the frameworks and pynvml. Exit status 1
when a check fails; a framework that is not installed is skipped and said so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
MODULES = {"caffe": "caffe", "jax": "jax", "mxnet": "mxnet", "pytorch": "torch", "tensorflow": "tensorflow"}
"""Framework folder -> the module its smoke script imports."""
STEPS, CHECKPOINT_EVERY, PACE = 60, 10, "0.2"
TIMEOUT = 900.0
GPU_DEVICES = ("cuda", "gpu")


def load_module(name: str, path: Path) -> ModuleType:
    """A stdlib-only module of this checkout by its file (its package may need more than this Python has)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class GpuSampler:
    """The sidecar's NVML sampling, every half second: utilisation (its own function) and memory per GPU."""

    utilisation: dict[int, float] = field(default_factory=dict)
    memory_mib: dict[int, float] = field(default_factory=dict)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            self._sample()
        except Exception as e:  # noqa: BLE001 - a failing sampler is reported, not lost in its thread
            self.error = f"sampling failed: {type(e).__name__}: {e}"

    def _sample(self) -> None:
        resources = load_module("resources", ROOT / "controller_sidecar" / "resources.py")
        if resources.gpu_utilisation() is None:
            self.error = "no NVML: install nvidia-ml-py (the sidecar image's pin) on a host with the NVIDIA driver"
            return
        import pynvml  # there: gpu_utilisation() answered through it

        while not self._stop.wait(0.5):
            for index, value in enumerate(resources.gpu_utilisation() or []):
                self.utilisation[index] = max(self.utilisation.get(index, 0.0), value)
                memory = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
                self.memory_mib[index] = max(self.memory_mib.get(index, 0.0), memory.used / 2**20)

    def stop(self) -> None:
        self._stop.set()


def job_folder(scratch: Path) -> dict[str, str]:
    """A /job-like folder and the variables that point the learner helper at it."""
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
    return env


def learner_run(python: str, framework: str, env: dict[str, str], pace: bool) -> subprocess.Popen[bytes]:
    command = [
        python,
        str(ROOT / "learner_base" / "bin" / "learner-run"),
        python,
        str(ROOT / "frameworks" / framework / "smoke" / "train.py"),
        "--steps",
        str(STEPS),
        "--checkpoint-every",
        str(CHECKPOINT_EVERY),
    ]
    extra = {"SMOKE_MIN_STEP_SECONDS": PACE} if pace else {}
    full = {**os.environ, **env, **extra, "PYTHONPATH": str(ROOT / "learner_base"), "LEARNER_HALT_GRACE": "60"}
    return subprocess.Popen(command, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def check_framework(python: str, framework: str, scratch: Path, smokedata: ModuleType) -> str:
    """Train, halt after the first checkpoint, resume to the end; the detail, or RuntimeError with the evidence."""
    env = job_folder(scratch)
    smokedata.write_smoke_dataset(Path(env["DATA_DIR"]))
    control, checkpoints = Path(env["JOB_STATE_DIR"]), Path(env["CHECKPOINT_DIR"])
    (control / "start").write_text("")
    first = learner_run(python, framework, env, pace=True)
    reached = wait_for(lambda: any(checkpoints.glob("ckpt-*")), TIMEOUT)
    (control / "halt").write_text("")
    out = first.communicate(timeout=TIMEOUT)[0].decode("utf-8", "replace")
    exit_record = json.loads((control / "learner.exit").read_text())
    if not reached or exit_record.get("reason") != "halted":
        raise RuntimeError(f"halt after the first checkpoint: {exit_record}\n{out[-1500:]}")
    halted_at = max(int(p.name.split("-", 1)[1]) for p in checkpoints.glob("ckpt-*"))
    for name in ("halt", "learner.exit"):
        (control / name).unlink()
    second = learner_run(python, framework, env, pace=False)
    out = second.communicate(timeout=TIMEOUT)[0].decode("utf-8", "replace")
    summary_path = Path(env["RESULT_DIR"]) / "summary.json"
    if second.returncode != 0 or not summary_path.exists():
        raise RuntimeError(f"resume: exit {second.returncode}\n{out[-1500:]}")
    summary = json.loads(summary_path.read_text())
    device = str(summary.get("device", ""))
    if not device.lower().startswith(GPU_DEVICES):
        raise RuntimeError(f"trained on {device or 'an unnamed device'}, not a GPU")
    if summary.get("start_step") != halted_at + 1 or summary.get("final_step") != STEPS:
        start, final = summary.get("start_step"), summary.get("final_step")
        raise RuntimeError(f"resumed at {start} (want {halted_at + 1}), ended at {final} (want {STEPS})")
    return (
        f"on {device}: halted at step {halted_at}, resumed at {halted_at + 1}, finished {STEPS}; "
        f"loss {summary.get('loss'):.4f}, accuracy {summary.get('accuracy'):.3f}"
    )


def installed(python: str, module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([python, "-c", probe], check=False).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("frameworks", nargs="*", help=f"only these (default: all of {', '.join(MODULES)})")
    parser.add_argument("--python", default=sys.executable, help="the Python whose frameworks to use")
    args = parser.parse_args()
    smokedata = load_module("smokedata", ROOT / "build" / "smokedata.py")
    sampler = GpuSampler()
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    failed = False
    for framework in args.frameworks or list(MODULES):
        if not installed(args.python, MODULES[framework]):
            print(f"skip {framework}: {MODULES[framework]} is not installed in {args.python}", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix=f"gpu-check-{framework}-") as scratch:
            try:
                detail = check_framework(args.python, framework, Path(scratch), smokedata)
                print(f"pass {framework}: {detail}", flush=True)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                failed = True
                print(f"FAIL {framework}: {e}", flush=True)
    sampler.stop()
    thread.join(timeout=5)
    if sampler.error:
        failed = True
        print(f"FAIL nvml: {sampler.error}")
    else:
        for index in sorted(sampler.memory_mib):
            utilisation, memory = sampler.utilisation.get(index, 0.0), sampler.memory_mib[index]
            print(f"nvml gpu {index}: peak utilisation {utilisation:.0%}, peak memory used {memory:.0f} MiB")
        if not sampler.memory_mib:
            failed = True
            print("FAIL nvml: NVML answered but counted no GPU")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
