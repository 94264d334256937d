"""`learnerkit image lock`: computing a lock, and filling the cache from one (where locks live and whether one
is an image's: learnerkit_build.lock.committed).

The lock of an image is every Debian package of its base plus what its runtime install step adds (the same
package list the template installs), and every wheel its pinned requirements resolve to. An image compiled in a
builder stage (framework.yaml's `builder`) adds what that stage installs on the same base: its .debs, its
source distributions and the wheels of its venv.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from learnerkit_build.lock.cache import LOCKED_BUILDER_DIR, LOCKED_SHARED_DIR, missing
from learnerkit_build.lock.committed import base_lock_path, image_lock_path
from learnerkit_build.lock.debian import download_debs, resolve_debs
from learnerkit_build.lock.model import (
    BuilderLock,
    Lock,
    LockedDeb,
    LockedWheel,
    LockError,
    make_builder,
    make_lock,
    read_lock,
    write_lock,
)
from learnerkit_build.lock.python import download_sources, download_wheels, resolve_sources, resolve_wheels
from learnerkit_build.recipes.render import RUNTIME_APT, BuildInputs, render_dockerfile
from learnerkit_build.recipes.spec import BuilderSpec, ImageSpec

_File = TypeVar("_File", LockedDeb, LockedWheel)


@dataclass(frozen=True)
class LockTarget:
    """One lockable image: what it installs, on which base, and where its lock is committed."""

    name: str
    path: Path
    base_ref: str
    python: str
    apt: tuple[str, ...]
    """What the image apt-installs besides RUNTIME_APT."""
    pip: tuple[str, ...]
    runtime: bool = True
    """Whether RUNTIME_APT is installed (not for the base itself)."""
    builder: BuilderSpec | None = None
    """What its builder stage installs (framework.yaml's `builder`)."""


UNLOCKED_INSTALLS = {
    "apt-get update": "apt-get from the mirrors",
    "pip download": "pip download from the indexes",
    "/bin/pip install": "pip from the indexes",
}
"""What a rendered locked Dockerfile says where it still installs outside the locked steps (learner_base/macros.j2)."""


def image_target(image: ImageSpec, base_ref: str) -> LockTarget:
    if not image.local_base:
        raise LockError(f"{image.name}: only images on a local base can be locked (its base is {image.variant.base})")
    pip = image.variant.pip
    if pip is None or not pip.packages:
        raise LockError(f"{image.name}: installs outside variant.pip (a framework_install of its own): not lockable")
    locked = render_dockerfile(image.folder.parents[1], image, base_ref or "lock/base", BuildInputs(), locked=True)
    unlocked = unlocked_installs(locked)
    if unlocked:
        raise LockError(
            f"{image.name}: not lockable: its template installs outside the locked steps ({'; '.join(unlocked)}), "
            "so what it builds would not follow from a lock"
        )
    if pip.shared and f"source={LOCKED_SHARED_DIR}," not in locked:
        raise LockError(
            f"{image.name}: framework.yaml's pip.shared is set but its template never installs it with "
            "pip_install_shared (learner_base/macros.j2): a locked build would miss those wheels"
        )
    if image.variant.builder and f"source={LOCKED_BUILDER_DIR}" not in locked:
        raise LockError(
            f"{image.name}: framework.yaml's builder is set but its template's locked render never installs from "
            f"{LOCKED_BUILDER_DIR} (apt_install, pip_install with lock_dir, locked_sources: learner_base/macros.j2)"
        )
    return LockTarget(
        name=image.name,
        path=image_lock_path(image),
        base_ref=base_ref,
        python=image.python,
        apt=tuple(image.variant.apt),
        pip=tuple(pip.packages),
        builder=image.variant.builder,
    )


def unlocked_installs(dockerfile: str) -> list[str]:
    """`stage <name>: <what>, ...` for each stage of a rendered Dockerfile that installs from mirrors or indexes:
    a builder stage's output reaches the image too. The last stage is `learner`."""
    found = []
    stages = dockerfile.split("\nFROM ")[1:]
    for number, stage in enumerate(stages):
        header = stage.split("\n", 1)[0].split()
        name = "learner" if number == len(stages) - 1 else header[-1] if "AS" in header else str(number)
        unlocked = [what for marker, what in UNLOCKED_INSTALLS.items() if marker in stage]
        if unlocked:
            found.append(f"stage {name}: {', '.join(unlocked)}")
    return found


def compute_lock(target: LockTarget, inputs: BuildInputs) -> Lock:
    """Resolve `target` now (apt in its base, pip from the build's indexes) and fill the cache."""
    debs = resolve_debs(target.base_ref, sorted(set((*RUNTIME_APT, *target.apt)) if target.runtime else set()))
    wheels = resolve_wheels(list(target.pip), target.python, inputs) if target.pip else []
    builder = compute_builder(target.builder, target.base_ref, target.python, inputs) if target.builder else None
    lock = make_lock(target.name, debs, wheels, builder)
    fill_cache(lock, target.base_ref, inputs)
    return lock


def compute_builder(builder: BuilderSpec, base_ref: str, python: str, inputs: BuildInputs) -> BuilderLock:
    """What a builder stage on `base_ref` installs: what `apt-get install` of its packages adds to the base (apt in
    a container of it), the wheels its requirements resolve to, and its source distributions."""
    added = [deb for deb in resolve_debs(base_ref, sorted(set(builder.apt))) if deb.origin == "image"]
    wheels = resolve_wheels(builder.wheels, python, inputs) if builder.wheels else []
    sources = resolve_sources(builder.sources, inputs) if builder.sources else []
    return make_builder(added, wheels, sources)


def lock_target(target: LockTarget, inputs: BuildInputs) -> tuple[Lock, bool]:
    """Compute and write `target`'s lock; returns it and whether the file changed."""
    lock = compute_lock(target, inputs)
    before = read_lock(target.path) if target.path.exists() else None
    if before != lock:
        write_lock(target.path, lock)
    return lock, before != lock


def fill_cache(lock: Lock, base_ref: str, inputs: BuildInputs) -> None:
    """Download what the cache lacks of `lock` (a fresh machine fills it once from the committed lock)."""
    absent = set(missing(lock))
    builder = lock.builder or make_builder([], [], [])
    download_debs(base_ref, _unique([d for d in (*lock.installed_debs(), *builder.debian) if d.filename in absent]))
    download_wheels(_unique([w for w in (*lock.python, *builder.python) if w.filename in absent]), inputs)
    download_sources([s for s in builder.sources if s.filename in absent], inputs)
    still = missing(lock)
    if still:
        raise LockError(f"{lock.image}: could not fetch {', '.join(still)} into the lock cache")


def _unique(files: list[_File]) -> list[_File]:
    """`files` without repeats: the builder stage and the image may lock the same .deb or wheel (a runtime library,
    the CUDA runtime), fetched once."""
    return list(dict.fromkeys(files))


def base_target(root: Path, base_name: str, base_ref: str, python: str) -> LockTarget:
    """The base alone: its Debian packages, nothing added (what every image lock starts from)."""
    return LockTarget(f"base:{base_name}", base_lock_path(root, base_name), base_ref, python, (), (), runtime=False)
