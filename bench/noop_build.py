"""No-op build benchmark: `learnerkit image build SPEC` when nothing changed, the whole command as a child process.

It first checks, in this process and with the building parts switched off, that a build of SPEC would find its
content tag (the base there, the lock cache full, an image of the same inputs hash tagged); it refuses
otherwise and never starts a build. Then it times, taking turns, the no-op build, `learnerkit --help` (the
command's own start) and `python -c pass` (the floor no Python command can go below), several runs each, and
prints the medians (wall, and CPU: user + system, which a loaded host inflates less), the no-op build's ratio
to each baseline and the target: a no-op build answers in at most 0.5 s.

Needs SPEC built (`learnerkit image build SPEC`, or `make images`). The child processes get no
`LEARNERKIT_INDEX_URL`, `..._EXTRA_INDEX_URLS`, `..._FIND_LINKS` or `..._CA_BUNDLE`, so the check and the
command read the same inputs: the host's pip configuration. Usage: python bench/noop_build.py [SPEC] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from learnerkit_build.builds import basemake, images
from learnerkit_build.builds.baseimage import BaseRecipe
from learnerkit_build.builds.buildkit import BuildRequest, LogSink
from learnerkit_build.builds.images import build_image
from learnerkit_build.lock import compute
from learnerkit_build.lock.cache import missing
from learnerkit_build.lock.model import Lock
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs
from learnerkit_build.recipes.render import BuildInputs

REPO = Path(__file__).resolve().parents[1]
LEARNERKIT = str(Path(sys.executable).parent / "learnerkit")
TARGET_S = 0.5
INPUT_VARIABLES = (
    "LEARNERKIT_INDEX_URL",
    "LEARNERKIT_EXTRA_INDEX_URLS",
    "LEARNERKIT_FIND_LINKS",
    "LEARNERKIT_CA_BUNDLE",
)


class WouldBuild(Exception):
    """A build of SPEC would make something: the benchmark measures only a no-op."""


def _refuse_build(request: BuildRequest, on_line: LogSink) -> str:
    raise WouldBuild(f"{request.image_name} is not built with these inputs")


def _refuse_base(recipe: BaseRecipe, reference: str, on_line: LogSink) -> str:
    raise WouldBuild(f"the base {reference} is not on this engine")


def _refuse_fetch(lock: Lock, base_ref: str, inputs: BuildInputs) -> None:
    if missing(lock):
        raise WouldBuild(f"the lock cache lacks files of {lock.image}'s lock")


def check_noop(spec: str) -> str:
    """The content tag the command will find; raises WouldBuild where it would build or fetch instead."""
    matrix = load_matrix(REPO)
    [image] = matrix.select([spec], select_all=False, variants=None)
    inputs = resolve_build_inputs(BuildOptions(), pip_config(REPO)).inputs
    # The names build_image calls, as its modules hold them (fetching and making a base are imported when needed):
    setattr(images, "run_build", _refuse_build)  # noqa: B010
    setattr(compute, "fill_cache", _refuse_fetch)  # noqa: B010
    setattr(basemake, "make_base", _refuse_base)  # noqa: B010
    result = build_image(REPO, image, inputs, lambda _line: None)
    if result.status != "cached" or result.immutable_reference is None:
        raise WouldBuild(f"{spec}: {result.status} ({result.reason})")
    return result.immutable_reference


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system, its children included) and stdout of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=REPO)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="pytorch:2.13-cpu")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in INPUT_VARIABLES}
    try:
        tag = check_noop(args.spec)
    except WouldBuild as e:
        raise SystemExit(f"not a no-op: {e}; build it first (learnerkit image build {args.spec})") from e
    commands = {
        "image build (no-op)": [LEARNERKIT, "image", "build", args.spec, "--output", "json"],
        "learnerkit --help": [LEARNERKIT, "--help"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for run in range(args.runs + 1):  # the first round warms the page cache and is not counted
        for name, argv in commands.items():
            seconds, cpu_seconds, out = timed(argv, env)
            if name.startswith("image build"):
                [result] = json.loads(out)["images"]
                if result["status"] != "cached":
                    raise SystemExit(f"the command did {result['status']}, not a no-op: {result}")
            if run:
                times[name].append(seconds)
                cpu[name].append(cpu_seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    noop = medians["image build (no-op)"]
    print(f"no-op build of {args.spec} ({tag}), {args.runs} runs each, medians:")
    for name, median in medians.items():
        spread = f"min {min(times[name]):.3f}, max {max(times[name]):.3f}"
        print(f"  {name:<22} {median:6.3f} s   ({spread}; CPU median {statistics.median(cpu[name]):.3f} s)")
    print(f"  ratio to learnerkit --help: {noop / medians['learnerkit --help']:.2f}")
    print(f"  ratio to python -c pass:    {noop / medians['python -c pass']:.2f}")
    cpu_medians = {name: statistics.median(values) for name, values in cpu.items()}
    cpu_ratio = cpu_medians["image build (no-op)"] / cpu_medians["learnerkit --help"]
    print(f"  CPU ratio to learnerkit --help: {cpu_ratio:.2f}")
    verdict = "meets" if noop <= TARGET_S else "misses"
    print(f"  target: <= {TARGET_S} s: {noop:.3f} s {verdict} it")


if __name__ == "__main__":
    main()
