"""`learnerkit image prune`: drop content tags that the moving tags no longer point at.

Every build whose inputs changed leaves the previous image under its old `<tag>-<hash12>` tag; pruning
removes those tags (the engine deletes an image with its last tag), and old content tags of the local bases the
selected images are built on the same way.
Images still used by a container are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import docker.errors

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import BASE_REPOSITORY, BASES, base_reference, recipe_for
from learnerkit_build.recipes.spec import ImageSpec


@dataclass(frozen=True)
class PruneResult:
    tag: str
    status: str
    """removed, would remove (dry run), or kept: <why>."""


def stale_tags(images: list[ImageSpec]) -> list[str]:
    """Content tags of the selected images, and of the local bases they are built on, that are no longer current
    (`image prune jax:0.10-cpu` leaves the other images' and their bases' alone)."""
    stale: list[str] = []
    for image in images:
        current = engine.image_id(f"{image.repository()}:{image.tag}")
        stale += _tags_except(image.repository(), f"{image.tag}-", current)
    for name in sorted({base for image in images if (base := image.local_base) in BASES}):
        current = engine.image_id(base_reference(recipe_for(name)))
        stale += _tags_except(BASE_REPOSITORY, f"{name}-", current)
    return sorted(set(stale))


def _tags_except(repository: str, prefix: str, current: str | None) -> list[str]:
    return [
        tag
        for found in engine.engine().images.list(name=repository)
        if found.id != current
        for tag in found.tags
        if tag.startswith(f"{repository}:{prefix}")
    ]


def prune(images: list[ImageSpec], *, dry_run: bool) -> list[PruneResult]:
    results = []
    for tag in stale_tags(images):
        if dry_run:
            results.append(PruneResult(tag, "would remove"))
            continue
        try:
            engine.engine().images.remove(tag)
            results.append(PruneResult(tag, "removed"))
        except docker.errors.APIError as e:
            results.append(PruneResult(tag, f"kept: {e.explanation}"))
    return results
