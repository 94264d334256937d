"""Cold-start benchmark: how long a fresh machine waits for `make demo` and for the image matrix.

Two modes:

`--fill` (safe, the default): fills an EMPTY lock cache in a temporary `LEARNERKIT_HOME` with every file the
selected images' locks name, taking turns between the download pool (`--downloads N`) and one download at a time,
and prints the seconds of each, the ratio, the bytes fetched and that no file was fetched twice (the files the
locks name, counted per image, against the distinct sha256s fetched). It touches neither this machine's lock cache
nor its images.

`--cold --i-mean-it` (destructive): empties every cache first: the project's Docker images (`learnerkit/*`), the
engine's build cache, the lock cache, the image scan and test records (a fresh machine scans the demo's image) and
the virtual environment; pip and npm get empty caches of their own for the run. Then it times `make demo`,
`make images TIER=...` and, with `--test`, `make test TIER=...` from there (a newcomer's second command: cold
`make test` is the matrix and that run together), and prints each image's seconds (`<state
home>/build-durations.json`, written by the builds), the bytes the lock cache was filled with, and the targets
beside them (demo 180 s, image matrix 1,500 s, cold `make test` 2,700 s). Without `--i-mean-it` it refuses and
destroys nothing: the images it removes take an hour to build again. `--demo-only` times `make demo` alone,
removing only the demo's images (the base, `pytorch:2.13-cpu`, the sidecar) and keeping the others.

Usage: python bench/coldstart.py [--fill] [--tier test] [--variant cpu] [--downloads 8] [--runs 1]
       python bench/coldstart.py --cold --i-mean-it [--tier test] [--jobs N] [--test]
       python bench/coldstart.py --cold --i-mean-it --demo-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from learnerkit_build.builds.baseimage import BASE_REPOSITORY
from learnerkit_build.builds.prefetch import fill_selection
from learnerkit_build.builds.schedule import DURATIONS_FILE
from learnerkit_build.builds.sidecarimage import SIDECAR_REPOSITORY
from learnerkit_build.lock.cache import DEFAULT_DOWNLOADS, cached_path
from learnerkit_build.lock.committed import image_lock
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs
from learnerkit_build.recipes.spec import ImageSpec
from learnerkit_build.recipes.tiers import load_tier
from learnerkit_build.state import state_home

REPO = Path(__file__).resolve().parents[1]
DEMO_TARGET_S = 180.0
MATRIX_TARGET_S = 1500.0
DEMO_SPEC = "pytorch:2.13-cpu"
COLD_TEST_TARGET_S = 2700.0


def selection(tier: str, variants: list[str]) -> list[ImageSpec]:
    return load_matrix(REPO).select([], variants=variants or None, tier=load_tier(REPO, tier))


def per_image(images: list[ImageSpec]) -> dict[str, dict[str, int]]:
    """Each image's locked files and their bytes in the cache, and how many of them another selected image locks
    too (fetched once for both)."""
    locks = {image.name: lock for image in images if (lock := image_lock(image)) is not None}
    owners: dict[str, int] = {}
    for lock in locks.values():
        for sha in {sha for _, sha in lock.files()}:
            owners[sha] = owners.get(sha, 0) + 1
    return {
        name: {
            "files": len(shas),
            "bytes": sum(cached_path(sha).stat().st_size for sha in shas if cached_path(sha).is_file()),
            "shared_files": sum(1 for sha in shas if owners[sha] > 1),
        }
        for name, lock in locks.items()
        for shas in [{sha for _, sha in lock.files()}]
    }


def fill_once(images: list[ImageSpec], downloads: int) -> dict[str, object]:
    """Fill an empty cache in a temporary LEARNERKIT_HOME; the machine's own cache is never read or written."""
    inputs = resolve_build_inputs(BuildOptions(), pip_config(REPO)).inputs
    saved = os.environ.get("LEARNERKIT_HOME")
    with tempfile.TemporaryDirectory(prefix="learnerkit-coldstart-") as home:
        os.environ["LEARNERKIT_HOME"] = home
        try:
            started = time.monotonic()
            report = fill_selection(REPO, images, inputs, jobs=downloads)
            seconds = time.monotonic() - started
            images_bytes = per_image(images)
        finally:
            if saved is None:
                os.environ.pop("LEARNERKIT_HOME", None)
            else:
                os.environ["LEARNERKIT_HOME"] = saved
    return {
        "seconds": round(seconds, 1),
        "plan_s": report.plan_s,
        "fetch_s": report.fetch_s,
        "files": report.fetched,
        "bytes": report.bytes_fetched,
        "retried": report.retried,
        "per_image": images_bytes,
    }


def fill_bench(args: argparse.Namespace) -> dict[str, object]:
    images = selection(args.tier, args.variant)
    named = [sha for image in images if (lock := image_lock(image)) for _, sha in lock.files()]
    runs: dict[str, list[dict[str, object]]] = {"pool": [], "serial": []}
    for _ in range(args.runs):
        runs["pool"].append(fill_once(images, args.downloads))
        runs["serial"].append(fill_once(images, 1))
    best = {mode: min(float(str(r["seconds"])) for r in results) for mode, results in runs.items()}
    first = runs["pool"][0]
    return {
        "images": [image.name for image in images],
        "files_named_by_locks": len(named),
        "distinct_files": len(set(named)),
        "fetched_files": first["files"],
        "fetched_bytes": first["bytes"],
        "per_image": first.pop("per_image"),
        "downloads": args.downloads,
        "runs": runs,
        "pool_s": round(best["pool"], 1),
        "serial_s": round(best["serial"], 1),
        "serial_over_pool": round(best["serial"] / best["pool"], 2),
    }


def demo_images() -> tuple[str, ...]:
    """The tag prefixes of what `make demo` builds: the base, its learner image and the sidecar."""
    (learner,) = load_matrix(REPO).select([DEMO_SPEC])
    return (f"{BASE_REPOSITORY}:", f"{learner.repository()}:{learner.tag}", f"{SIDECAR_REPOSITORY}:")


def emptied_caches(images: tuple[str, ...]) -> list[str]:
    """Remove the images whose tags start with one of `images`, the engine's build cache, the lock cache, the scan
    and test records and the venv; say what went."""
    done = []
    listed = subprocess.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, check=True
    ).stdout.split()
    ours = [ref for ref in listed if ref.startswith(images)]
    if ours:
        subprocess.run(["docker", "image", "rm", "--force", *ours], check=True, capture_output=True)
    done.append(f"{len(ours)} images ({', '.join(images)}...)")
    subprocess.run(["docker", "builder", "prune", "--all", "--force"], check=True, capture_output=True)
    done.append("the build cache")
    home = state_home()
    records = (home / "image-scans", home / "image-tests")
    for path in (home / "lock-cache", *records, REPO / ".venv", home / DURATIONS_FILE):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        done.append(str(path))
    return done


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Run `argv`, each line of its output shown with the seconds since it started (the breakdown of a cold run:
    the venv, the base, each image, the services, the job); its seconds in all."""
    started = time.monotonic()
    with subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as command:
        assert command.stdout is not None
        for line in command.stdout:
            print(f"[{time.monotonic() - started:7.1f} s] {line}", end="", flush=True)
    if command.returncode != 0:
        raise subprocess.CalledProcessError(command.returncode, argv)
    return time.monotonic() - started


def fresh_tool_caches(scratch: Path) -> dict[str, str]:
    """The environment for the timed commands: pip and npm caches that start empty, as on a fresh machine,
    without removing this machine's own."""
    env = dict(os.environ)
    env["PIP_CACHE_DIR"] = str(scratch / "pip")
    env["npm_config_cache"] = str(scratch / "npm")
    return env


def cold_demo_bench() -> dict[str, object]:
    """Only the demo: its images go, the matrix's others stay (the base is rebuilt bit for bit, so they stay
    current), so the run costs minutes, not the hour the whole matrix takes."""
    emptied = emptied_caches(demo_images())
    with tempfile.TemporaryDirectory(prefix="coldstart-") as scratch:
        demo_s = timed(["make", "demo"], fresh_tool_caches(Path(scratch)))
    return {"emptied": emptied, "demo_s": round(demo_s, 1), "demo_target_s": DEMO_TARGET_S}


def cold_bench(args: argparse.Namespace) -> dict[str, object]:
    emptied = emptied_caches(("learnerkit/",))
    with tempfile.TemporaryDirectory(prefix="coldstart-") as scratch:
        env = fresh_tool_caches(Path(scratch))
        demo_s = timed(["make", "demo"], env)
        if args.jobs is not None:
            env["LEARNERKIT_BUILD_JOBS"] = str(args.jobs)
        matrix_s = timed(["make", "images", f"TIER={args.tier}"], env)
        test_s = timed(["make", "test", f"TIER={args.tier}"], env) if args.test else None
    durations = json.loads((state_home() / DURATIONS_FILE).read_text(encoding="utf-8"))
    cache = state_home() / "lock-cache"
    fetched = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    return {
        "emptied": emptied,
        "demo_s": round(demo_s, 1),
        "demo_target_s": DEMO_TARGET_S,
        "matrix_s": round(matrix_s, 1),
        "matrix_target_s": MATRIX_TARGET_S,
        "test_after_matrix_s": None if test_s is None else round(test_s, 1),
        "cold_test_s": None if test_s is None else round(matrix_s + test_s, 1),
        "cold_test_target_s": COLD_TEST_TARGET_S,
        "jobs": args.jobs,
        "image_s": durations,
        "lock_cache_bytes": fetched,
        "per_image": per_image(selection(args.tier, [])),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="empty every cache and time make demo and make images")
    parser.add_argument("--i-mean-it", action="store_true", help="confirm --cold: it removes images and caches")
    parser.add_argument("--fill", action="store_true", help="time filling an empty lock cache (the default)")
    parser.add_argument("--tier", default="test")
    parser.add_argument("--variant", action="append", default=[], help="only these variants (--fill)")
    parser.add_argument("--downloads", type=int, default=DEFAULT_DOWNLOADS)
    parser.add_argument("--jobs", type=int, default=None, help="images built at once (--cold; default: the tool's)")
    parser.add_argument("--demo-only", action="store_true", help="--cold for make demo alone: its images only")
    parser.add_argument("--test", action="store_true", help="also time make test after the matrix (--cold)")
    parser.add_argument("--runs", type=int, default=1, help="pool and serial fills, taking turns (--fill)")
    args = parser.parse_args()
    if args.cold and not args.i_mean_it:
        images, rebuild = (
            ("the demo's images (the base, pytorch:2.13-cpu, the sidecar)", "minutes")
            if args.demo_only
            else ("every learnerkit/* image", "about an hour")
        )
        print(
            f"refusing: --cold removes {images}, the engine's build cache, the lock cache "
            f"({state_home() / 'lock-cache'}), the image scan and test records and {REPO / '.venv'}; rebuilding "
            f"them takes {rebuild}. Add --i-mean-it to go ahead.",
            file=sys.stderr,
        )
        return 2
    if not args.cold:
        result = fill_bench(args)
    elif args.demo_only:
        result = cold_demo_bench()
    else:
        result = cold_bench(args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
