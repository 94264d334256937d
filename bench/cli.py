"""CLI start-up benchmark: whole-process wall time of the verbs people and scripts run most.

It starts the dev services with the scheduler in a temporary state folder (etcd, SeaweedFS, the scheduler on
the Docker engine), runs the demo's PyTorch job to its end, then times each command as a child process, several
runs each, and prints the median beside the bare interpreter's start measured in the same run (the floor no
Python command can go below). Target: every verb's median <= 0.25 s.

Needs the PyTorch and sidecar images (`make images`). Usage: python bench/cli.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from learnerkit_build.imagetest.smokedata import write_smoke_dataset

REPO = Path(__file__).resolve().parents[1]
LEARNERKIT = str(Path(sys.executable).parent / "learnerkit")
TARGET_S = 0.25


def learnerkit(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([LEARNERKIT, *args], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    return done.stdout


def median_wall(argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=REPO)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def dev_environment(state: Path) -> dict[str, str]:
    env = {**os.environ, "LEARNERKIT_SERVICES_DIR": str(state)}
    learnerkit(env, "dev", "up", "--with-scheduler", "--any-port")
    exports = json.loads(learnerkit(env, "dev", "env", "--output", "json"))
    return {**env, **{str(k): str(v) for k, v in exports.items()}}


def finished_job(env: dict[str, str], scratch: Path) -> str:
    data = write_smoke_dataset(scratch / "data")
    learnerkit(env, "dev", "upload", str(data.parent), "s3://training-data/pytorch-smoke/")
    manifest = scratch / "manifest.yml"
    template = (REPO / "examples" / "pytorch-smoke" / "manifest.yml").read_text(encoding="utf-8")
    manifest.write_text(_expand(template, env), encoding="utf-8")
    job = json.loads(learnerkit(env, "job", "submit", str(manifest), "--output", "json"))["job_id"]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = json.loads(learnerkit(env, "job", "status", job, "--output", "json"))["status"]
        if status in {"COMPLETED", "FAILED", "HALTED", "CANCELLED"}:
            return str(job)
        time.sleep(1)
    raise SystemExit(f"job {job} did not finish in 600 s")


def _expand(text: str, env: dict[str, str]) -> str:
    """The manifest's ``${NAME}`` placeholders filled from the dev environment (as `make demo` does)."""
    return re.sub(r"\$\{(\w+)\}", lambda match: env.get(match[1], match[0]), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="learnerkit-bench-cli-") as tmp:
        scratch = Path(tmp)
        env = dev_environment(scratch / "state")
        try:
            job = finished_job(env, scratch)
            floor = median_wall([sys.executable, "-c", "pass"], env, args.runs)
            verbs = {
                "learnerkit --help": [LEARNERKIT, "--help"],
                "learnerkit job list": [LEARNERKIT, "job", "list"],
                "learnerkit job status JOB": [LEARNERKIT, "job", "status", job],
                "learnerkit job logs JOB": [LEARNERKIT, "job", "logs", job],
            }
            print(f"{'command':28} {'median s':>9} {'x python -c pass':>17} {'target':>8}")
            print(f"{'python -c pass (floor)':28} {floor:9.3f} {1.0:17.2f}")
            for name, argv in verbs.items():
                wall = median_wall(argv, env, args.runs)
                verdict = "met" if wall <= TARGET_S else "MISSED"
                print(f"{name:28} {wall:9.3f} {wall / floor:17.2f} {verdict:>8}")
        finally:
            learnerkit(env, "dev", "down")


if __name__ == "__main__":
    main()
