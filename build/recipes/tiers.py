"""Image tiers: named subsets of the matrix that a test target builds and tests (`image-tiers.yaml`).

`make test` uses the `test` tier so that a fresh machine runs it within CI's time; `full` is every image of the
matrix and needs no entry. Where a tier leaves an image out, the tests say so in a skip naming the tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import ConfigError
from learnerkit.common.yamlfile import LocatedYaml, load_located_yaml
from learnerkit_build.errors import SpecError
from learnerkit_build.recipes.spec import ImageSpec

TIERS_FILE = "image-tiers.yaml"
FULL_TIER = "full"
_KEYS = ("variants", "images")


@dataclass(frozen=True)
class Tier:
    name: str
    variants: tuple[str, ...]
    """Every image of these variants."""
    images: tuple[str, ...]
    """And these images, by spec (`mxnet:1.9.1-cuda`)."""

    def holds(self, image: ImageSpec) -> bool:
        return self.name == FULL_TIER or image.variant_name in self.variants or image.name in self.images


def load_tier(root: Path, name: str) -> Tier:
    """The tier `name` of `root/image-tiers.yaml` (`full` always exists); a `SpecError` names file, line and field."""
    if name == FULL_TIER:
        return Tier(name=FULL_TIER, variants=(), images=())
    path = root / TIERS_FILE
    try:
        doc = load_located_yaml(path)
    except ConfigError as e:
        raise SpecError(str(e)) from e
    tiers = doc.data if isinstance(doc.data, dict) else {}
    if name not in tiers:
        known = ", ".join(sorted([FULL_TIER, *(str(key) for key in tiers)]))
        raise SpecError(f"{path}: no tier {name!r}; tiers: {known}")
    return _parse_tier(doc, name, tiers[name])


def _parse_tier(doc: LocatedYaml, name: str, body: object) -> Tier:
    if not isinstance(body, dict):
        raise SpecError(f"{doc.where((name,))}: {name}: a tier is a mapping with keys {', '.join(_KEYS)}")
    for key in body:
        if key not in _KEYS:
            raise SpecError(f"{doc.where((name, key))}: {name}: unknown key {key!r}; valid keys: {', '.join(_KEYS)}")
    lists: dict[str, tuple[str, ...]] = {}
    for key in _KEYS:
        value = body.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise SpecError(f"{doc.where((name, key))}: {name}.{key}: expected a list of strings")
        lists[key] = tuple(value)
    return Tier(name=name, variants=lists["variants"], images=lists["images"])
