"""The manifest's ``catalog:`` section: the scheduler registers the COMPLETED job's model in the model catalog
once its evaluations pass (docs/catalog.md), and may point an alias at it. The catalog's name and alias rules
live here, below the catalog room, which reads them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from learnerkit.scheduler.manifest.fields import FieldReader

SECTION = "catalog"
KEYS = ("name", "alias")
MODEL_NAME = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
MODEL_NAME_MAX = 100
MODEL_NAME_HELP = "lower-case letters and digits, separated by one of . _ - (at most 100)"
ALIAS = re.compile(r"[a-z][a-z0-9_-]{0,62}")
RESERVED_ALIASES = frozenset({"aliases", "latest"})
CATALOG_TAG_PREFIXES = ("v-", "sha256-")
ALIAS_HELP = (
    "a lower-case letter, then letters, digits, _ or - (at most 63); not 'v-...' or 'sha256-...' (the catalog's "
    f"own tags), {', '.join(sorted(RESERVED_ALIASES))}"
)


def model_name_ok(name: str) -> bool:
    return len(name) <= MODEL_NAME_MAX and MODEL_NAME.fullmatch(name) is not None


def alias_ok(alias: str) -> bool:
    return (
        ALIAS.fullmatch(alias) is not None
        and alias not in RESERVED_ALIASES
        and not alias.startswith(CATALOG_TAG_PREFIXES)
    )


@dataclass(frozen=True)
class CatalogSpec:
    name: str
    """The model's name in the job's tenant."""
    alias: str | None = None
    """Moved to the new version, on the catalog's proof (every gate), signed by the scheduler."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "alias": self.alias}


def parse_catalog(reader: FieldReader, value: Any, has_evaluations: bool) -> CatalogSpec | None:
    """None when absent or wrong (each problem recorded with its field)."""
    if value is None:
        return None
    loc = (SECTION,)
    section = reader.mapping(value, loc, KEYS)
    if section is None:
        return None
    problems = len(reader.problems)
    name = reader.string(section, loc, "name", required=True)
    if name is not None and not model_name_ok(name):
        reader.fail((*loc, "name"), f"{name!r} is not valid: {MODEL_NAME_HELP}")
    alias = reader.string(section, loc, "alias")
    if alias is not None and not alias_ok(alias):
        reader.fail((*loc, "alias"), f"{alias!r} is not valid: {ALIAS_HELP}")
    if not has_evaluations:
        reader.fail(
            loc,
            "needs an evaluations: section: the scheduler registers the model once its evaluations pass, and a "
            "model nothing evaluated is registered by hand (`learnerkit model register JOB`)",
        )
    if len(reader.problems) > problems or name is None:
        return None
    return CatalogSpec(name, alias)
