"""The image matrix: every framework folder's versions x variants, and selection by spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from learnerkit_build.errors import SpecError
from learnerkit_build.recipes.spec import ImageSpec, iter_images, load_framework, parse_image_selector
from learnerkit_build.recipes.tiers import Tier


@dataclass(frozen=True)
class Matrix:
    images: tuple[ImageSpec, ...]

    @property
    def frameworks(self) -> list[str]:
        return sorted({image.framework.name for image in self.images})

    @property
    def training_images(self) -> tuple[ImageSpec, ...]:
        """The images a manifest's `framework` may name: all but the evaluators (docs/evaluations.md)."""
        return tuple(image for image in self.images if image.framework.smoke.kind == "training")

    def select(
        self,
        selectors: list[str],
        *,
        select_all: bool = False,
        variants: list[str] | None = None,
        tier: Tier | None = None,
    ) -> list[ImageSpec]:
        """Images matching any selector (`pytorch`, `pytorch:2.13`, `pytorch:2.13-cpu`, full tag), or held by
        `tier`."""
        if not selectors and not select_all and tier is None:
            raise SpecError("name at least one image spec (e.g. pytorch:2.13-cpu), a --tier, or pass --all")
        chosen = list(self.images) if select_all else self.in_tier(tier) if tier else []
        for selector in selectors:
            matched = [image for image in self.images if _matches(image, selector)]
            if not matched:
                raise SpecError(self._no_match_message(selector))
            chosen.extend(image for image in matched if image not in chosen)
        if variants:
            chosen = [image for image in chosen if image.variant_name in variants]
        return chosen

    def in_tier(self, tier: Tier) -> list[ImageSpec]:
        """The images `tier` holds; an image it names that the matrix lacks is an error."""
        names = {image.name for image in self.images}
        for spec in tier.images:
            if spec not in names:
                raise SpecError(
                    f"tier {tier.name!r} names {spec!r}, which is not in the matrix; images: {', '.join(sorted(names))}"
                )
        return [image for image in self.images if tier.holds(image)]

    def _no_match_message(self, selector: str) -> str:
        framework, _ = parse_image_selector(selector)
        if framework not in self.frameworks:
            return f"image spec {selector!r}: unknown framework {framework!r}; valid: {', '.join(self.frameworks)}"
        valid = ", ".join(image.name for image in self.images if image.framework.name == framework)
        return f"image spec {selector!r}: no such version/variant of {framework}; valid: {valid}"


def _matches(image: ImageSpec, selector: str) -> bool:
    framework, rest = parse_image_selector(selector)
    if framework != image.framework.name:
        return False
    if rest is None:
        return True
    return rest in {image.version, f"{image.version}-{image.variant_name}", image.tag}


def load_matrix(root: Path) -> Matrix:
    """Load every `frameworks/*/framework.yaml` under the project root."""
    folders = sorted(p.parent for p in (root / "frameworks").glob("*/framework.yaml"))
    images: list[ImageSpec] = []
    for folder in folders:
        images.extend(iter_images(load_framework(folder), folder))
    return Matrix(images=tuple(images))
