"""`learnerkit image lock`: where each lock file lives, computing it, and filling the cache from it.

The lock of an image is every Debian package of its base plus what its runtime install step adds (the same
package list the template installs), and every wheel its pinned requirements resolve to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from learnerkit_build.lock.cache import LOCKED_SHARED_DIR, missing
from learnerkit_build.lock.debian import download_debs, resolve_debs
from learnerkit_build.lock.model import Lock, LockError, make_lock, normalise_name, read_lock, write_lock
from learnerkit_build.lock.python import download_wheels, resolve_wheels
from learnerkit_build.render import RUNTIME_APT, BuildInputs, render_dockerfile
from learnerkit_build.spec import ImageSpec

SIDECAR_LOCK = "controller_sidecar/image/lock.json"
BASE_LOCK_DIR = "learner_base/lock"


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


def image_lock_path(image: ImageSpec) -> Path:
    return image.folder / "lock" / f"{image.version}-{image.variant_name}.json"


def base_lock_path(root: Path, base_name: str) -> Path:
    return root / BASE_LOCK_DIR / f"{base_name}.json"


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
    return LockTarget(
        name=image.name,
        path=image_lock_path(image),
        base_ref=base_ref,
        python=image.python,
        apt=tuple(image.variant.apt),
        pip=tuple(pip.packages),
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


def shared_distributions(image: ImageSpec) -> frozenset[str]:
    """The distributions (normalised names) of the image's pip_install_shared layer: framework.yaml's `pip.shared`."""
    return (
        frozenset(normalise_name(Requirement(text).name) for text in image.variant.pip.shared)
        if image.variant.pip
        else frozenset()
    )


def compute_lock(target: LockTarget, inputs: BuildInputs) -> Lock:
    """Resolve `target` now (apt in its base, pip from the build's indexes) and fill the cache."""
    debs = resolve_debs(target.base_ref, sorted(set((*RUNTIME_APT, *target.apt)) if target.runtime else set()))
    lock = make_lock(target.name, debs, resolve_wheels(list(target.pip), target.python, inputs) if target.pip else [])
    fill_cache(lock, target.base_ref, inputs)
    return lock


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
    download_debs(base_ref, [d for d in lock.installed_debs() if d.filename in absent])
    download_wheels([w for w in lock.python if w.filename in absent], inputs)
    still = missing(lock)
    if still:
        raise LockError(f"{lock.image}: could not fetch {', '.join(still)} into the lock cache")


def base_target(root: Path, base_name: str, base_ref: str, python: str) -> LockTarget:
    """The base alone: its Debian packages, nothing added (what every image lock starts from)."""
    return LockTarget(f"base:{base_name}", base_lock_path(root, base_name), base_ref, python, (), (), runtime=False)


def committed_lock(path: Path) -> Lock | None:
    """The committed lock at `path`, or None where an image has none yet (it then builds unlocked)."""
    return read_lock(path) if path.exists() else None


def image_lock(image: ImageSpec) -> Lock | None:
    """The committed lock of `image`, refused (naming the file) when it is not what framework.yaml asks: another
    image's lock, or one made before a pin changed would otherwise build the wrong version without a word."""
    path = image_lock_path(image)
    lock = committed_lock(path)
    if lock is None:
        return None
    problems = [f"it is the lock of {lock.image}"] if lock.image != image.name else []
    wheels = {wheel.name: wheel.version for wheel in lock.python}
    for text in image.variant.pip.packages if image.variant.pip else []:
        requirement = Requirement(text)
        version = wheels.get(normalise_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"framework.yaml pins {text}, the lock holds {version or 'none'}")
    debs = {deb.package for deb in lock.debian}
    problems += [f"framework.yaml installs {name}, the lock has not" for name in image.variant.apt if name not in debs]
    if problems:
        raise LockError(
            f"{path}: not the lock of {image.name}: {'; '.join(problems)} (run `learnerkit image lock {image.name}`)"
        )
    return lock
