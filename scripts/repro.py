"""`make repro`: every locked cpu image, the sidecar and the base built twice from scratch, compared by image ID.

Each pair is built from two copies of the project in different folders, the second under umask 077 (its files
with umask-077 modes) and TZ=Asia/Tokyo; images without BuildKit's cache (`--rebuild`), the base with mmdebstrap
from its lock into two scratch folders. A pair that differs is saved and compared (diffoscope, or
learnerkit_build.imagediff's listing), and the command exits 1. Prints one line per image, the two IDs side by
side and each build's seconds. Images superseded by the second build are removed. Not part of `make test`.
Usage: python scripts/repro.py [base] [sidecar] [SPEC...]   (default: the base, the sidecar and every cpu variant
with a committed lock)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.baseimage import base_archive, recipe_for
from learnerkit_build.imagediff import describe_difference
from learnerkit_build.images import build_image
from learnerkit_build.lock.compute import image_lock_path
from learnerkit_build.matrix import load_matrix
from learnerkit_build.pipconfig import BuildOptions, pip_config, resolve_build_inputs
from learnerkit_build.render import BuildInputs
from learnerkit_build.sidecarimage import build_sidecar

REPO = Path(__file__).resolve().parents[1]
Build = Callable[[Path, Path], str]
"""(project copy, scratch folder) -> image ID."""


def quiet(_line: str) -> None:
    """Build logs are not this command's subject."""


def checkout(dest: Path, folders: list[str], *, private: bool) -> Path:
    for folder in folders:
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if private:
        for path in dest.rglob("*"):
            path.chmod(0o700 if path.is_dir() or path.stat().st_mode & 0o111 else 0o600)
    return dest


def base_build(root: Path, scratch: Path) -> str:
    return base_archive(recipe_for("debian-bookworm", root), scratch, quiet)[1]


def image_build(spec: str, inputs: BuildInputs) -> Build:
    def build(root: Path, _scratch: Path) -> str:
        result = build_image(root, load_matrix(root).select([spec])[0], inputs, quiet, rebuild=True)
        return str(result.image_id)

    return build


def sidecar_build(inputs: BuildInputs) -> Build:
    def build(root: Path, _scratch: Path) -> str:
        return str(build_sidecar(root, inputs, quiet, rebuild=True).image_id)

    return build


def twice(name: str, folders: list[str], build: Build, work: Path) -> bool:
    """Build `name` twice apart; print both IDs; on a difference print what differs. True when identical."""
    made, seconds = [], []
    for number, (umask, zone) in enumerate(((0o022, "UTC"), (0o077, "Asia/Tokyo"))):
        folder = work / name.replace(":", "-") / ("one" if number == 0 else "elsewhere/two")
        previous = os.umask(umask)
        os.environ["TZ"] = zone
        time.tzset()
        try:
            root = checkout(folder / "project", folders, private=umask == 0o077)
            scratch = folder / "scratch"
            scratch.mkdir(parents=True)
            started = time.monotonic()
            made.append((build(root, scratch), scratch))
            seconds.append(time.monotonic() - started)
        finally:
            os.umask(previous)
            os.environ.pop("TZ", None)
            time.tzset()
    (first, first_scratch), (second, second_scratch) = made
    same = first == second
    verdict = "same" if same else "DIFFERENT"
    print(f"{name}: {verdict} {first} ({seconds[0]:.0f} s) {second} ({seconds[1]:.0f} s)", flush=True)
    if not same:
        print(describe_difference(*_archives(name, first, first_scratch, second, second_scratch)), flush=True)
    if first != second and engine.image_id(first) and not engine.engine().images.get(first).tags:
        engine.remove_image(first)
    return same


def _archives(name: str, first: str, first_scratch: Path, second: str, second_scratch: Path) -> tuple[Path, Path]:
    """The two builds as archives: the base's are already there; an image's are saved from the engine."""
    if name == "base":
        return first_scratch / "image.tar", second_scratch / "image.tar"
    engine.save_image(first, first_scratch / "image.tar")
    engine.save_image(second, second_scratch / "image.tar")
    return first_scratch / "image.tar", second_scratch / "image.tar"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("specs", nargs="*")
    args = parser.parse_args()
    named = set(args.specs)
    specs = [spec for spec in args.specs if spec not in ("base", "sidecar")]
    matrix = load_matrix(REPO)
    images = matrix.select(specs) if specs else [] if named else list(matrix.images)
    locked = [image for image in images if image.variant_name == "cpu" and image_lock_path(image).is_file()]
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    with tempfile.TemporaryDirectory(prefix="learnerkit-repro-") as scratch:
        work = Path(scratch)
        results = []
        if not named or "base" in named:
            results.append(twice("base", ["learner_base", "frameworks/mxnet"], base_build, work))
        if not named or "sidecar" in named:
            results.append(twice("sidecar", ["controller_sidecar", "learner_base"], sidecar_build(inputs), work))
        for image in locked:
            folders = ["learner_base", f"frameworks/{image.framework.name}"]
            results.append(twice(image.name, folders, image_build(image.name, inputs), work))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
