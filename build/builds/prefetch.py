"""Fill the lock cache for a whole selection before its builds: each locked file once, in parallel.

The selected images' locks name their .debs and wheels by sha256; a file several images lock (the NVIDIA wheels of
the cuda images, the runtime .debs of all) is one entry. Entries already there are hashed again (remembered by file
state, so an unchanged entry costs a stat) and a corrupted one is removed and fetched again. URLs come from apt's
signed indexes (the base's mirrors) and from the build's pip indexes and folders; what neither offers is fetched by
the image's own path afterwards (apt in a container of its base, pip), one image at a time. Last, the cache is
capped where it grew: the least recently used entries beyond `LEARNERKIT_LOCK_CACHE_MB` go, never one the selection
needs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from learnerkit_build.builds.baseimage import recipe_for
from learnerkit_build.builds.basemake import source_lines
from learnerkit_build.builds.images import base_ref_for
from learnerkit_build.lock.cache import DEFAULT_DOWNLOADS, cache_root, cached_path
from learnerkit_build.lock.committed import image_lock
from learnerkit_build.lock.compute import fill_cache
from learnerkit_build.lock.fetch import Download, ProgressSink, clear_stale_partials, fetch_all
from learnerkit_build.lock.hostapt import deb_downloads
from learnerkit_build.lock.model import Lock, LockedDeb, LockedWheel, LockError
from learnerkit_build.lock.prune import cap_bytes, mark_used, prune
from learnerkit_build.lock.sources import index_downloads
from learnerkit_build.recipes.filehashes import file_sha256, remembering
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.recipes.spec import ImageSpec


@dataclass(frozen=True)
class FillReport:
    needed: int
    """Distinct files (by sha256) the selection's locks name."""
    present: int
    """Of those, already in the cache with their sha256."""
    corrupted: int
    """Entries whose bytes were not their sha256: removed and fetched again."""
    fetched: int
    bytes_fetched: int
    retried: int
    by_image_path: int
    """Files no index offered, fetched by the image's own path (apt in its base, pip)."""
    pruned: int
    plan_s: float
    """Checking the cache and finding the URLs (apt's lists, the index pages)."""
    fetch_s: float
    seconds: float


def locked_images(images: list[ImageSpec]) -> list[tuple[ImageSpec, Lock]]:
    return [(image, lock) for image in images if (lock := image_lock(image)) is not None]


def plan(locked: list[tuple[ImageSpec, Lock]], absent: set[str], inputs: BuildInputs) -> tuple[list[Download], int]:
    """The files `absent` (sha256s) of the locked images, as downloads, and how many files no index offers."""
    debs: dict[str, dict[str, LockedDeb]] = {}
    wheels: dict[str, LockedWheel] = {}
    for image, lock in locked:
        builder = lock.builder
        for deb in (*lock.installed_debs(), *(builder.debian if builder else ())):
            debs.setdefault(image.local_base or "", {})[deb.sha256] = deb
        for wheel in (*lock.python, *(builder.python if builder else ()), *(builder.sources if builder else ())):
            wheels[wheel.sha256] = wheel
    downloads: list[Download] = []
    unoffered = 0
    seen: set[str] = set()
    for base, by_sha in sorted(debs.items()):
        lacking = [deb for sha, deb in by_sha.items() if sha not in seen and sha in absent]
        seen.update(by_sha)
        if not base or not lacking:
            unoffered += len(lacking)
            continue
        try:
            found, left = deb_downloads(lacking, source_lines(recipe_for(base)))
        except LockError:
            found, left = [], lacking
        downloads += found
        unoffered += len(left)
    absent_wheels = [w for sha, w in wheels.items() if sha in absent]
    found_wheels, left_wheels = index_downloads(absent_wheels, inputs)
    return downloads + found_wheels, unoffered + len(left_wheels)


def drop_corrupted(sha256s: set[str]) -> int:
    """Remove the cache entries among `sha256s` whose bytes are not their name; returns how many."""
    corrupted = 0
    folder = cache_root()
    for sha in sorted(sha256s):
        path = folder / sha
        if path.is_file() and file_sha256(path) != sha:
            path.unlink()
            corrupted += 1
    return corrupted


def fill_selection(
    root: Path,
    images: list[ImageSpec],
    inputs: BuildInputs,
    *,
    jobs: int = DEFAULT_DOWNLOADS,
    on_plan: ProgressSink | None = None,
    on_progress: ProgressSink | None = None,
) -> FillReport:
    """Fill the cache with every file the selected images' locks name, the entries already there checked (with the
    hashes remembered in project `root`); `on_plan(bytes, files)` is told the total before the downloads start
    (bytes where the sources announce sizes), `on_progress` as they arrive."""
    started = time.monotonic()
    locked = locked_images(images)
    needed = {sha for _, lock in locked for _, sha in lock.files()}
    with remembering(root):
        corrupted = drop_corrupted(needed)
    folder = cache_root()
    absent = {sha for sha in needed if not (folder / sha).is_file()}
    downloads, _ = plan(locked, absent, inputs)
    planned = time.monotonic()
    if on_plan is not None:
        on_plan(sum(d.size or 0 for d in downloads), len(downloads))
    report = fetch_all(downloads, jobs=jobs, on_progress=on_progress, ca_bundle=inputs.ca_bundle)
    fetched = time.monotonic()
    by_image_path = 0
    still = {sha for sha in absent if not (folder / sha).is_file()}
    for image, lock in locked if still else ():
        before = sum(1 for _, sha in lock.files() if not cached_path(sha).is_file())
        if before:
            fill_cache(lock, base_ref_for(image), inputs)
            by_image_path += before
    mark_used(needed)
    grew = report.files > 0 or by_image_path > 0
    clear_stale_partials()
    pruned = prune(cap_bytes(), needed).removed if grew else 0
    return FillReport(
        needed=len(needed),
        present=len(needed) - len(absent),
        corrupted=corrupted,
        fetched=report.files,
        bytes_fetched=report.bytes,
        retried=report.retried,
        by_image_path=by_image_path,
        pruned=pruned,
        plan_s=round(planned - started, 1),
        fetch_s=round(fetched - planned, 1),
        seconds=round(time.monotonic() - started, 1),
    )
