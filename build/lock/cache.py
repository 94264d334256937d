"""The content-addressed cache of locked files: `<state home>/lock-cache/sha256/<hex>`, filled once.

A file enters only after its sha256 was checked, under that sha256, so a cached file is the locked file or
absent; builds take their .debs and wheels from here, never from a mirror or an index.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path

from learnerkit_build.lock.model import BuilderLock, Lock, LockError, pip_requirements
from learnerkit_build.recipes.context import ContextFile
from learnerkit_build.recipes.filehashes import file_sha256
from learnerkit_build.state import state_home

LOCKED_DIR = ".locked"
"""Where a build context holds the locked files; the locked install steps bind-mount it."""
LOCKED_DEBS_DIR = f"{LOCKED_DIR}/debs"
LOCKED_WHEELS_DIR = f"{LOCKED_DIR}/wheels"
LOCKED_SHARED_DIR = f"{LOCKED_DIR}/shared"
LOCKED_BUILDER_DIR = ".locked-builder"
"""Where a build context holds the files of the lock's builder section: beside `.locked/`, not in it, so the learner
stage's locked steps never mount (and are never keyed by) what only the builder stage installs."""
LOCKED_SOURCES_MOUNT = "/run/locked/sources"
"""Where the locked_sources macro (learner_base/macros.j2) mounts `.locked-builder/sources/`: SHA256SUMS names the
source distributions there."""


DEFAULT_DOWNLOADS = 8
"""Downloads at once filling the cache (`image build --downloads`): enough to fill a link from a CDN of many small
wheels, few enough to be polite."""


def cache_root() -> Path:
    return state_home() / "lock-cache" / "sha256"


def cached_path(sha256: str) -> Path:
    return cache_root() / sha256


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def admit(path: Path, expected: str | None = None) -> str:
    """Move `path` into the cache under its sha256 (checked against `expected`); return the sha256."""
    actual = sha256_file(path)
    if expected is not None and actual != expected:
        raise LockError(f"{path.name}: sha256 {actual} is not the locked {expected}")
    target = cached_path(actual)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".tmp-{actual}-{os.getpid()}")
        shutil.copyfile(path, temp)
        temp.chmod(0o644)
        temp.replace(target)
    return actual


def missing(lock: Lock) -> list[str]:
    """Filenames of the lock's image debs and wheels that the cache lacks."""
    return [name for name, sha in lock.files() if not cached_path(sha).is_file()]


def locked_context_files(lock: Lock, shared: Collection[str] = ()) -> list[ContextFile]:
    """The lock's image debs and wheels, from the cache, under their own names in `.locked/`, each named by its
    locked sha256: the inputs hash is known before the cache holds them; `check_cached` before a build uses them.

    `shared`: the distributions (normalised names) of the image's pip_install_shared layer: their wheels and a
    requirements file of their own go to `.locked/shared/`, the same bytes in every image that shares the layer;
    the rest's to `.locked/wheels/` and `.locked/requirements.txt`. `python.txt` lists them all."""
    first, rest = lock.wheels_split(shared)
    files = [_entry(d.sha256, f"{LOCKED_DEBS_DIR}/{d.filename}") for d in lock.installed_debs()]
    files += [_entry(w.sha256, f"{LOCKED_WHEELS_DIR}/{w.filename}") for w in rest]
    files += [_entry(w.sha256, f"{LOCKED_SHARED_DIR}/wheels/{w.filename}") for w in first]
    files += [
        ContextFile(stored_text(lock.dpkg_list()), f"{LOCKED_DIR}/dpkg.txt"),
        ContextFile(stored_text(lock.python_list()), f"{LOCKED_DIR}/python.txt"),
        ContextFile(stored_text(pip_requirements(rest)), f"{LOCKED_DIR}/requirements.txt"),
    ]
    if first:
        files.append(ContextFile(stored_text(pip_requirements(first)), f"{LOCKED_SHARED_DIR}/requirements.txt"))
    return files + (builder_context_files(lock, lock.builder) if lock.builder else [])


def check_cached(lock: Lock) -> None:
    """Every file the lock names is in the cache with its sha256 (hashed again: recipes.filehashes remembers it),
    else a LockError naming the first that is not."""
    absent = missing(lock)
    if absent:
        raise LockError(f"{lock.image}: the lock cache lacks {', '.join(absent)} (a build fetches what its lock names)")
    for name, sha in lock.files():
        if file_sha256(cached_path(sha)) != sha:
            raise LockError(f"{lock.image}: the lock cache's {name} ({cached_path(sha)}) is not the locked {sha}")


def _entry(sha256: str, target: str) -> ContextFile:
    return ContextFile(cached_path(sha256), target, sha256)


def builder_context_files(lock: Lock, builder: BuilderLock) -> list[ContextFile]:
    """The builder section's files under `.locked-builder/`, laid out as `.locked/` is (debs/, dpkg.txt, wheels/,
    requirements.txt, python.txt) for the same macros, and its source distributions in sources/ with their
    SHA256SUMS."""
    folder = LOCKED_BUILDER_DIR
    files = [_entry(d.sha256, f"{folder}/debs/{d.filename}") for d in builder.debian]
    files += [_entry(w.sha256, f"{folder}/wheels/{w.filename}") for w in builder.python]
    files += [_entry(s.sha256, f"{folder}/sources/{s.filename}") for s in builder.sources]
    sums = "".join(f"{s.sha256}  {LOCKED_SOURCES_MOUNT}/{s.filename}\n" for s in builder.sources)
    files += [
        ContextFile(stored_text(lock.builder_dpkg_list()), f"{folder}/dpkg.txt"),
        ContextFile(stored_text(builder.python_list()), f"{folder}/python.txt"),
        ContextFile(stored_text(pip_requirements(builder.python)), f"{folder}/requirements.txt"),
        ContextFile(stored_text(sums), f"{folder}/sources/SHA256SUMS"),
    ]
    return files


def stored_text(text: str) -> Path:
    """`text` as a file of the cache (the lists a build checks itself against travel in its context)."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", delete=False, prefix="learnerkit-lock-") as handle:
        handle.write(text)
    try:
        return cached_path(admit(Path(handle.name)))
    finally:
        Path(handle.name).unlink()
