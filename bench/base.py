"""Base benchmark: the cold build of the local base, before (main's recipe: debootstrap, apt-get upgrade in
the chroot, tar, `docker import`) and now (mmdebstrap from the lock, `learnerkit_build.builds.baseimage`), alternating,
`--runs` times each, all in this run; prints the median seconds of each, the ratio now/before, and the image
IDs of the builds made now side by side (one ID when the base is reproducible).

The lock cache is filled before timing (a fresh machine fills it once). Nothing is tagged; every image made is
removed. Needs root and debootstrap (the host package; `make setup` no longer installs it).
Usage: python bench/base.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import recipe_for
from learnerkit_build.builds.basemake import base_archive, source_lines
from learnerkit_build.lock.hostapt import fetch_debs
from learnerkit_build.lock.model import read_lock
from learnerkit_build.repro.reproducible import load_archive

REPO = Path(__file__).resolve().parents[1]


def quiet(_line: str) -> None:
    """Build logs are not this benchmark's subject."""


def before(scratch: Path) -> str:
    """main's base recipe, step by step; returns the imported image's ID."""
    recipe = recipe_for("debian-bookworm", REPO)
    rootfs = scratch / "rootfs"
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    steps = [
        ["debootstrap", f"--variant={recipe.variant}", recipe.suite, str(rootfs), recipe.mirror],
        ["chroot", str(rootfs), "apt-get", "update"],
        ["chroot", str(rootfs), "apt-get", "-y", "-o", "Dpkg::Options::=--force-confold", "upgrade"],
        ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(scratch / "rootfs.tar"), "."],
    ]
    for step in steps:
        subprocess.run(step, check=True, capture_output=True, env=env)
    with (scratch / "rootfs.tar").open("rb") as handle:
        said = engine.engine().api.import_image_from_data(handle.read())
    return str(json.loads(said)["status"])


def now(scratch: Path) -> str:
    archive, image = base_archive(recipe_for("debian-bookworm", REPO), scratch, quiet)
    load_archive(archive, image)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("debootstrap") is None:
        raise SystemExit("bench/base.py: debootstrap (main's recipe) is not installed")
    recipe = recipe_for("debian-bookworm", REPO)
    assert recipe.lock_file is not None, "the base lock is committed"
    fetch_debs(list(read_lock(recipe.lock_file).debian), source_lines(recipe))
    times: dict[str, list[float]] = {"before": [], "now": []}
    made: dict[str, list[str]] = {"before": [], "now": []}
    for _ in range(args.runs):
        for name, build in (("before", before), ("now", now)):
            with tempfile.TemporaryDirectory(prefix=f"learnerkit-bench-base-{name}-") as scratch:
                started = time.monotonic()
                image = build(Path(scratch))
                times[name].append(time.monotonic() - started)
            made[name].append(image)
            print(f"{name}: {times[name][-1]:.1f} s {image}", flush=True)
    for image in {*made["before"], *made["now"]}:
        if engine.image_id(image) and not engine.engine().images.get(image).tags:
            engine.remove_image(image)
    before_s, now_s = statistics.median(times["before"]), statistics.median(times["now"])
    print(f"before (debootstrap + upgrade + import): {before_s:.1f} s; now (mmdebstrap from the lock): {now_s:.1f} s")
    print(f"ratio now/before: {now_s / before_s:.2f}")
    print("image IDs now, side by side:", " ".join(made["now"]))


if __name__ == "__main__":
    main()
