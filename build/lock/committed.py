"""The committed locks: where an image's or a base's lock file lives, and whether it is still that image's.

Apart from computing locks (learnerkit_build.lock.compute, which starts the Debian and pip resolvers): a no-op
build reads a lock and checks it against framework.yaml without importing them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement

from learnerkit_build.lock.model import Lock, LockedWheel, LockError, normalise_name, read_lock
from learnerkit_build.recipes.spec import BuilderSpec, ImageSpec

SIDECAR_LOCK = "controller_sidecar/image/lock.json"
BASE_LOCK_DIR = "learner_base/lock"


def image_lock_path(image: ImageSpec) -> Path:
    return image.folder / "lock" / f"{image.version}-{image.variant_name}.json"


def base_lock_path(root: Path, base_name: str) -> Path:
    return root / BASE_LOCK_DIR / f"{base_name}.json"


def shared_distributions(image: ImageSpec) -> frozenset[str]:
    """The distributions (normalised names) of the image's pip_install_shared layer: framework.yaml's `pip.shared`."""
    return (
        frozenset(normalise_name(Requirement(text).name) for text in image.variant.pip.shared)
        if image.variant.pip
        else frozenset()
    )


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
    pins = image.variant.pip.packages if image.variant.pip else []
    problems += _pin_problems("framework.yaml", pins, "the lock", lock.python)
    debs = {deb.package for deb in lock.debian}
    problems += [f"framework.yaml installs {name}, the lock has not" for name in image.variant.apt if name not in debs]
    problems += _builder_problems(image.variant.builder, lock)
    if problems:
        raise LockError(
            f"{path}: not the lock of {image.name}: {'; '.join(problems)} (run `learnerkit image lock {image.name}`)"
        )
    return lock


def _pin_problems(asks: str, pins: list[str], holds: str, locked: Iterable[LockedWheel]) -> list[str]:
    versions = {wheel.name: wheel.version for wheel in locked}
    problems = []
    for text in pins:
        requirement = Requirement(text)
        version = versions.get(normalise_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{asks} pins {text}, {holds} holds {version or 'none'}")
    return problems


def _builder_problems(builder: BuilderSpec | None, lock: Lock) -> list[str]:
    """Where the lock's builder section is not framework.yaml's `builder`: a pin or a package, or either missing."""
    if builder is None:
        return [] if lock.builder is None else ["the lock has a builder section, framework.yaml has none"]
    if lock.builder is None:
        return ["framework.yaml has a builder section, the lock has none"]
    asks, holds = "framework.yaml's builder", "the lock's builder"
    problems = _pin_problems(asks, builder.sources, holds, lock.builder.sources)
    problems += _pin_problems(asks, builder.wheels, holds, lock.builder.python)
    debs = {deb.package for deb in lock.debian if deb.origin == "base"} | {deb.package for deb in lock.builder.debian}
    return problems + [f"{asks} installs {name}, {holds} has not" for name in builder.apt if name not in debs]
