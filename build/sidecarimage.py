"""The controller sidecar's image: rendered, hashed and cached like a learner image.

Its inputs are ``controller_sidecar/image/`` (template and pinned requirements), the package's modules and
the two modules of ``learnerkit`` it imports; tagged ``learnerkit/sidecar:<version>`` and
``<version>-<inputs hash>``. An unchanged sidecar is not rebuilt.
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from learnerkit import __version__
from learnerkit_build import engine
from learnerkit_build.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.buildkit import BuildRequest, LogSink, run_build
from learnerkit_build.context import ContextFile, assemble_context, inputs_hash, tree_files
from learnerkit_build.errors import TemplateError
from learnerkit_build.images import HASH_LABEL, BuildResult, build_secrets, source_revision
from learnerkit_build.render import BuildInputs, make_environment

SIDECAR_REPOSITORY = "learnerkit/sidecar"
SIDECAR_TEMPLATE = "controller_sidecar/image/Dockerfile.j2"
REQUIREMENTS = "controller_sidecar/image/requirements.txt"
SIDECAR_BASE = "debian-bookworm"


def sidecar_reference() -> str:
    return f"{SIDECAR_REPOSITORY}:{__version__}"


def requirements(root: Path) -> list[str]:
    lines = (root / REQUIREMENTS).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def render_sidecar(root: Path, base_ref: str, inputs: BuildInputs) -> str:
    context = {
        "base_ref": base_ref,
        "build": {
            "wheelhouse": inputs.wheelhouse is not None,
            "ca": inputs.ca_bundle is not None,
            "index_url": inputs.index_url is not None,
        },
        "sidecar": {
            "version": __version__,
            "pip": {"packages": requirements(root), "index_url": None, "extra_index_urls": []},
        },
    }
    try:
        return make_environment(root).get_template(SIDECAR_TEMPLATE).render(context)
    except jinja2.TemplateError as e:
        raise TemplateError(f"{SIDECAR_TEMPLATE}: {e} (rendering the sidecar)") from e


def sidecar_files(root: Path, inputs: BuildInputs) -> list[ContextFile]:
    files = [
        item
        for item in tree_files(root / "controller_sidecar", "controller_sidecar")
        if item.target.endswith(".py") and "/image/" not in item.target
    ]
    files += [ContextFile(root / "learnerkit" / name, f"learnerkit/{name}") for name in ("__init__.py", "errors.py")]
    files.append(ContextFile(root / REQUIREMENTS, REQUIREMENTS))
    if inputs.wheelhouse is not None:
        files.extend(tree_files(inputs.wheelhouse, ".wheelhouse"))
    return sorted(files, key=lambda f: f.target)


def build_sidecar(root: Path, inputs: BuildInputs, on_line: LogSink, *, rebuild: bool = False) -> BuildResult:
    started = time.monotonic()
    recipe = recipe_for(SIDECAR_BASE)
    base_id, _ = ensure_base(recipe, on_line)
    base_ref = base_reference(recipe)
    dockerfile = render_sidecar(root, base_ref, inputs)
    files = sidecar_files(root, inputs)
    digest = inputs_hash(dockerfile, files, base_id, inputs)
    reference = sidecar_reference()
    immutable = f"{reference}-{digest[:12]}"
    existing = engine.image_id(immutable)
    if existing and not rebuild:
        if engine.image_id(reference) != existing:
            engine.tag_image(existing, SIDECAR_REPOSITORY, __version__)
        return BuildResult("sidecar", "cached", reference, immutable, existing, digest, time.monotonic() - started)
    labels = {
        HASH_LABEL: digest,
        "org.opencontainers.image.base.name": base_ref,
        "org.opencontainers.image.base.digest": base_id,
        "org.opencontainers.image.revision": source_revision(root),
        "org.opencontainers.image.created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with tempfile.TemporaryDirectory(prefix="learnerkit-ctx-") as scratch:
        context = Path(scratch) / "context"
        assemble_context(context, dockerfile, files)
        request = BuildRequest(
            context=context,
            image_name="sidecar",
            labels=labels,
            secrets=build_secrets(Path(scratch), inputs),
            no_cache=rebuild,
        )
        built = run_build(request, on_line)
    engine.tag_image(built, SIDECAR_REPOSITORY, f"{__version__}-{digest[:12]}")
    engine.tag_image(built, SIDECAR_REPOSITORY, __version__)
    return BuildResult("sidecar", "built", reference, immutable, built, digest, time.monotonic() - started)
