"""Lock benchmark: what installing exactly the lock costs a cold build, against today's unlocked build.

For the sidecar and one learner image (default mxnet:1.9.1-cpu), each build without BuildKit's cache from the
same base, alternating, `--runs` times each, all in this run:
- unlocked: apt-get from the mirror and pip from the index, as an image without a lock builds;
- locked: the lock's .debs and wheels from the content-addressed cache (filled), then the normalisation every
  locked build gets (learnerkit_build.repro.reproducible);
- locked, empty cache: the same after filling an empty cache from the committed lock (a fresh machine, once).
Prints the median seconds of each and its ratio to unlocked (target: locked cold build <= 1.15).
No tag is made; the images built are removed.
Usage: python bench/lock.py [SPEC] [--runs N] [--no-sidecar] [--no-empty-cache] (the last two for large images,
e.g. a cuda one, whose empty-cache run fetches gigabytes again)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.builds.buildkit import BuildRequest, run_build
from learnerkit_build.builds.images import base_ref_for, build_secrets
from learnerkit_build.builds.sidecarimage import SIDECAR_BASE, render_sidecar, sidecar_files
from learnerkit_build.lock.cache import locked_context_files
from learnerkit_build.lock.committed import SIDECAR_LOCK, image_lock_path, shared_distributions
from learnerkit_build.lock.compute import fill_cache
from learnerkit_build.lock.model import read_lock
from learnerkit_build.recipes.context import ContextFile, assemble_context, context_files
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs
from learnerkit_build.recipes.render import SOURCE_DATE_EPOCH, BuildInputs, render_dockerfile
from learnerkit_build.repro.reproducible import normalise_image

REPO = Path(__file__).resolve().parents[1]
Plan = Callable[[bool], tuple[str, list[ContextFile]]]


def cold_build(dockerfile: str, files: list[ContextFile], inputs: BuildInputs, *, normalise: bool) -> float:
    """Seconds of one build without cache; `normalise`: as a locked build, with its normalisation."""
    with tempfile.TemporaryDirectory(prefix="learnerkit-bench-lock-") as scratch:
        context = Path(scratch) / "context"
        assemble_context(context, dockerfile, files)
        request = BuildRequest(context, "bench", {}, build_secrets(Path(scratch), inputs), no_cache=True)
        started = time.monotonic()
        image = run_build(request, lambda _line: None)
        made = [image]
        if normalise:
            made.append(normalise_image(image, SOURCE_DATE_EPOCH))
        seconds = time.monotonic() - started
    for built in made:
        if not engine.engine().images.get(built).tags:  # never an image someone tagged
            engine.remove_image(built)
    return seconds


def measure(
    name: str, lock_path: Path, base_ref: str, plan: Plan, inputs: BuildInputs, runs: int, *, empty_cache: bool
) -> None:
    lock = read_lock(lock_path)
    times: dict[str, list[float]] = {"unlocked": [], "locked": [], "locked, empty cache": []}
    for _ in range(runs):
        times["unlocked"].append(cold_build(*plan(False), inputs, normalise=False))
        times["locked"].append(cold_build(*plan(True), inputs, normalise=True))
        if not empty_cache:
            continue
        home = os.environ.get("LEARNERKIT_HOME")
        with tempfile.TemporaryDirectory(prefix="learnerkit-bench-home-") as empty:
            os.environ["LEARNERKIT_HOME"] = empty
            started = time.monotonic()
            fill_cache(lock, base_ref, inputs)
            filled = time.monotonic() - started
            times["locked, empty cache"].append(filled + cold_build(*plan(True), inputs, normalise=True))
            if home is None:
                del os.environ["LEARNERKIT_HOME"]
            else:
                os.environ["LEARNERKIT_HOME"] = home
    baseline = statistics.median(times["unlocked"])
    for kind, values in ((kind, values) for kind, values in times.items() if values):
        median = statistics.median(values)
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name:<18} {kind:<20} {median:7.1f} s  x{median / baseline:.2f}  ({each})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="mxnet:1.9.1-cpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-sidecar", action="store_true", help="measure the learner image only")
    parser.add_argument("--no-empty-cache", action="store_true", help="skip the runs that fill an empty cache")
    args = parser.parse_args()
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    recipe = recipe_for(SIDECAR_BASE)
    ensure_base(recipe, print)
    base_ref = base_reference(recipe)
    sidecar_lock = read_lock(REPO / SIDECAR_LOCK)
    fill_cache(sidecar_lock, base_ref, inputs)

    def sidecar(locked: bool) -> tuple[str, list[ContextFile]]:
        lock = sidecar_lock if locked else None
        return render_sidecar(REPO, base_ref, inputs, locked=locked), sidecar_files(REPO, inputs, lock)

    if not args.no_sidecar:
        measure(
            "sidecar", REPO / SIDECAR_LOCK, base_ref, sidecar, inputs, args.runs, empty_cache=not args.no_empty_cache
        )
    image = load_matrix(REPO).select([args.spec])[0]
    image_lock = read_lock(image_lock_path(image))
    fill_cache(image_lock, base_ref_for(image), inputs)

    def learner(locked: bool) -> tuple[str, list[ContextFile]]:
        locked_files = locked_context_files(image_lock, shared_distributions(image)) if locked else []
        files = context_files(REPO, image, inputs) + locked_files
        dockerfile = render_dockerfile(REPO, image, base_ref_for(image), inputs, locked=locked)
        return dockerfile, sorted(files, key=lambda f: f.target)

    measure(
        image.name,
        image_lock_path(image),
        base_ref_for(image),
        learner,
        inputs,
        args.runs,
        empty_cache=not args.no_empty_cache,
    )


if __name__ == "__main__":
    main()
