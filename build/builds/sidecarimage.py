"""The controller sidecar's image: rendered, hashed and cached like a learner image.

Its inputs are ``controller_sidecar/image/`` (template, pinned requirements and, once committed, the lock whose
files alone are then installed) and the package's modules,
nothing of ``learnerkit`` (the ``sidecar-standalone`` import contract); tagged ``learnerkit/sidecar:<version>``
and ``<version>-<inputs hash>``. An unchanged sidecar is not rebuilt.
"""

from __future__ import annotations

import time
from pathlib import Path

import jinja2

from learnerkit import __version__
from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.builds.buildkit import LogSink
from learnerkit_build.builds.images import BuildPlan, BuildResult, build_plan
from learnerkit_build.errors import TemplateError
from learnerkit_build.lock.cache import locked_context_files
from learnerkit_build.lock.committed import SIDECAR_LOCK, committed_lock
from learnerkit_build.lock.model import Lock
from learnerkit_build.recipes.context import ContextFile, tree_files, wheelhouse_files
from learnerkit_build.recipes.filehashes import remembering
from learnerkit_build.recipes.render import BuildInputs, build_context, lock_context, make_environment

SIDECAR_REPOSITORY = "learnerkit/sidecar"
SIDECAR_TEMPLATE = "controller_sidecar/image/Dockerfile.j2"
REQUIREMENTS = "controller_sidecar/image/requirements.txt"
SIDECAR_BASE = "debian-bookworm"


def sidecar_reference() -> str:
    return f"{SIDECAR_REPOSITORY}:{__version__}"


def requirements(root: Path) -> list[str]:
    lines = (root / REQUIREMENTS).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def render_sidecar(root: Path, base_ref: str, inputs: BuildInputs, *, locked: bool = False) -> str:
    context = {
        **lock_context(locked),
        "base_ref": base_ref,
        "build": build_context(inputs),
        "sidecar": {
            "version": __version__,
            "pip": {"packages": requirements(root), "index_url": None, "extra_index_urls": []},
        },
    }
    try:
        return make_environment(root).get_template(SIDECAR_TEMPLATE).render(context)
    except jinja2.TemplateError as e:
        raise TemplateError(f"{SIDECAR_TEMPLATE}: {e} (rendering the sidecar)") from e


def sidecar_files(root: Path, inputs: BuildInputs, lock: Lock | None = None) -> list[ContextFile]:
    files = [
        item
        for item in tree_files(root / "controller_sidecar", "controller_sidecar")
        if item.target.endswith(".py") and "/image/" not in item.target
    ]
    files.append(ContextFile(root / REQUIREMENTS, REQUIREMENTS))
    files.extend(wheelhouse_files(inputs))
    if lock is not None:
        files.extend(locked_context_files(lock))
    return sorted(files, key=lambda f: f.target)


def build_sidecar(
    root: Path, inputs: BuildInputs, on_line: LogSink, *, rebuild: bool = False, record_size: bool = False
) -> BuildResult:
    started = time.monotonic()
    with remembering(root):
        plan = plan_sidecar(root, inputs, on_line)
        return build_plan(root, plan, inputs, on_line, rebuild=rebuild, started=started, record_size=record_size)


def plan_sidecar(root: Path, inputs: BuildInputs, on_line: LogSink) -> BuildPlan:
    """What building the sidecar takes (its locked files named by sha256, the lock cache not needed yet)."""
    recipe = recipe_for(SIDECAR_BASE)
    base_id, _ = ensure_base(recipe, on_line)
    base_ref = base_reference(recipe)
    lock = committed_lock(root / SIDECAR_LOCK)
    return BuildPlan(
        name="sidecar",
        repository=SIDECAR_REPOSITORY,
        tag=__version__,
        dockerfile=render_sidecar(root, base_ref, inputs, locked=lock is not None),
        files=sidecar_files(root, inputs, lock),
        base_ref=base_ref,
        base_id=base_id,
        lock=lock,
    )
