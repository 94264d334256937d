"""Base images made on this machine by mmdebstrap, from the base's committed lock, loaded with a canonical config.

No registry can be pulled from, so the root of every learner image is made here. A base is cached by the hash
of its recipe (suite, mirrors, variant, slimming, the lock's bytes, mmdebstrap's version): the hash is part of
its tag. With a lock (`learner_base/lock/<name>.json`) the base holds exactly the lock's packages and two
builds anywhere give one image ID; without one it is made from the mirrors as they are (then lock it:
`learnerkit image lock --base`). `--rebuild` makes it again from the same recipe.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from learnerkit.common import engineimages
from learnerkit.common.errors import ConfigError
from learnerkit.common.project import find_project_root
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.lock.committed import base_lock_path

BASE_REPOSITORY = "learnerkit/base"
RECIPE_SCHEME = "learnerkit-base/3"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"


@dataclass(frozen=True)
class BaseRecipe:
    name: str
    suite: str
    python: str
    """The Python minor version the suite's python3 package provides."""
    mirror: str = DEFAULT_MIRROR
    security_mirror: str = DEFAULT_SECURITY_MIRROR
    variant: str = "minbase"
    """mmdebstrap's variant for a base made without a lock."""
    slim: bool = True
    """Drop docs (copyright files kept), man pages and translations, now and for every later install."""
    lock_file: Path | None = None
    """The committed lock the base is made from (its bytes are in the recipe hash, not its path)."""


BASES = {"debian-bookworm": BaseRecipe(name="debian-bookworm", suite="bookworm", python="3.11")}


def recipe_for(name: str, root: Path | None = None) -> BaseRecipe:
    """The recipe of a local base, with mirrors from $LEARNERKIT_DEBIAN_MIRROR / _SECURITY_MIRROR and the
    lock committed in the project at `root` (found from the current folder when None)."""
    if name not in BASES:
        raise ConfigError(f"unknown local base {name!r}; valid: {', '.join(sorted(BASES))}")
    recipe = BASES[name]
    lock = base_lock_path(find_project_root(root), name)
    return BaseRecipe(
        name=recipe.name,
        suite=recipe.suite,
        python=recipe.python,
        mirror=os.environ.get("LEARNERKIT_DEBIAN_MIRROR", recipe.mirror),
        security_mirror=os.environ.get("LEARNERKIT_DEBIAN_SECURITY_MIRROR", recipe.security_mirror),
        variant=recipe.variant,
        slim=recipe.slim,
        lock_file=lock if lock.is_file() else None,
    )


@functools.cache
def mmdebstrap_version() -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "mmdebstrap"], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def recipe_hash(recipe: BaseRecipe) -> str:
    fields = asdict(recipe)
    fields.pop("lock_file")
    lock = hashlib.sha256(recipe.lock_file.read_bytes()).hexdigest() if recipe.lock_file else None
    payload = json.dumps(
        {"scheme": RECIPE_SCHEME, **fields, "lock": lock, "mmdebstrap": mmdebstrap_version()}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def base_reference(recipe: BaseRecipe) -> str:
    """The immutable tag of a base: known without an engine, so templates render anywhere."""
    return f"{BASE_REPOSITORY}:{recipe.name}-{recipe_hash(recipe)[:12]}"


def ensure_base(recipe: BaseRecipe, on_line: LogSink, *, rebuild: bool = False) -> tuple[str, bool]:
    """The base's image ID, making it first when missing (or when `rebuild`); returns (id, made)."""
    reference = base_reference(recipe)
    existing = engineimages.image_id(reference)
    if existing and not rebuild:
        return existing, False
    # Making a base (mmdebstrap, the .deb fetcher, docker load) imports what a base that is there never needs.
    from learnerkit_build.builds.basemake import make_base

    return make_base(recipe, reference, on_line), True
