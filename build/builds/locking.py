"""What `learnerkit image lock` locks: the selected images, the sidecar and the local base, each on its base."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.builds.sidecarimage import SIDECAR_BASE, requirements
from learnerkit_build.lock.committed import SIDECAR_LOCK
from learnerkit_build.lock.compute import LockTarget, base_target, image_target, lock_target
from learnerkit_build.lock.model import LockError
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.recipes.spec import ImageSpec


@dataclass(frozen=True)
class LockResult:
    name: str
    path: str
    debian: int
    python: int
    status: str
    """`written` (new or changed), `unchanged`, or `refused: <why>` (an image no lock can describe)."""


def lock_targets(project: Path, images: list[ImageSpec], *, sidecar: bool, base: bool) -> list[LockTarget]:
    targets = []
    if base:
        recipe = recipe_for(SIDECAR_BASE)
        targets.append(base_target(project, recipe.name, base_reference(recipe), recipe.python))
    if sidecar:
        recipe = recipe_for(SIDECAR_BASE)
        pins = tuple(requirements(project))
        targets.append(LockTarget("sidecar", project / SIDECAR_LOCK, base_reference(recipe), recipe.python, (), pins))
    for image in images:
        local = image.local_base
        targets.append(image_target(image, base_reference(recipe_for(local)) if local else image.variant.base))
    return targets


def lockable(images: list[ImageSpec]) -> tuple[list[ImageSpec], list[LockResult]]:
    """The images a lock can describe, and a `not lockable` result (with why) for each other one."""
    kept, refused = [], []
    for image in images:
        try:
            image_target(image, "")
        except LockError as e:
            refused.append(LockResult(image.name, "", 0, 0, f"refused: {e}"))
        else:
            kept.append(image)
    return kept, refused


def lock_one(project: Path, target: LockTarget, inputs: BuildInputs, on_line: LogSink) -> LockResult:
    """Make sure the base exists, then compute and write `target`'s lock."""
    ensure_base(recipe_for(SIDECAR_BASE), on_line)
    on_line(f"resolving {target.name} in {target.base_ref}")
    lock, changed = lock_target(target, inputs)
    return LockResult(
        name=target.name,
        path=str(target.path.relative_to(project)),
        debian=len(lock.debian),
        python=len(lock.python),
        status="written" if changed else "unchanged",
    )
