"""Build learner images: resolve the base, render, hash the inputs, build only what is missing, tag."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from learnerkit.common import engineimages
from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.builds.buildkit import BuildRequest, LogSink, run_build
from learnerkit_build.builds.sizebudget import check_size
from learnerkit_build.builds.sizebudget import record_size as record_budget
from learnerkit_build.errors import BuildError, SpecError
from learnerkit_build.lock.cache import check_cached, locked_context_files, missing
from learnerkit_build.lock.committed import image_lock, shared_distributions
from learnerkit_build.lock.model import Lock
from learnerkit_build.recipes.context import ContextFile, assemble_context, context_files, inputs_hash
from learnerkit_build.recipes.filehashes import remembering
from learnerkit_build.recipes.render import SOURCE_DATE_EPOCH, BuildInputs, render_dockerfile
from learnerkit_build.recipes.spec import ImageSpec

HASH_LABEL = "io.learnerkit.inputs-hash"
WHEELHOUSE_MOUNT = "/run/wheelhouse"
"""Where the pip_install macro mounts the context's `.wheelhouse/`."""
BuildStatus = Literal["built", "cached", "skipped"]


@dataclass(frozen=True)
class BuildResult:
    spec: str
    status: BuildStatus
    reference: str
    """The moving tag, e.g. learnerkit/pytorch:2.13-cpu-py3.11."""
    immutable_reference: str | None = None
    """The content tag, e.g. learnerkit/pytorch:2.13-cpu-py3.11-<hash12>."""
    image_id: str | None = None
    inputs_hash: str | None = None
    seconds: float = 0.0
    reason: str | None = None


def base_ref_for(image: ImageSpec) -> str:
    """What the image's Dockerfile says FROM: the local base's content tag, or the external reference."""
    local = image.local_base
    return base_reference(recipe_for(local)) if local else image.variant.base


def render_image(root: Path, image: ImageSpec, inputs: BuildInputs) -> str:
    """The Dockerfile of `image`: locked (learnerkit_build.lock) when it has a committed lock."""
    local = image.local_base
    if local and recipe_for(local).python != image.python:
        raise SpecError(
            f"{image.folder / 'framework.yaml'}: {image.name}: base local:{local} provides Python "
            f"{recipe_for(local).python}, not {image.python}"
        )
    locked = image_lock(image) is not None
    return render_dockerfile(root, image, base_ref_for(image), inputs, locked=locked)


def build_image(
    root: Path,
    image: ImageSpec,
    inputs: BuildInputs,
    on_line: LogSink,
    *,
    rebuild: bool = False,
    record_size: bool = False,
) -> BuildResult:
    started = time.monotonic()
    with remembering(root):
        planned = plan_image(root, image, inputs, on_line)
        if isinstance(planned, BuildResult):
            return planned
        return build_plan(root, planned, inputs, on_line, rebuild=rebuild, started=started, record_size=record_size)


def plan_image(root: Path, image: ImageSpec, inputs: BuildInputs, on_line: LogSink) -> BuildPlan | BuildResult:
    """What building `image` takes (its locked files named by sha256, the lock cache not needed yet), or a
    `skipped` result where its base is not on this engine."""
    reference = f"{image.repository()}:{image.tag}"
    base_id = _resolve_base(image, on_line)
    if base_id is None:
        return BuildResult(
            spec=image.name,
            status="skipped",
            reference=reference,
            reason=f"base image {image.variant.base} is not on this engine ({image.variant.accelerator} variants "
            "are built where their base exists)",
        )
    files = context_files(root, image, inputs)
    lock = image_lock(image)
    if lock is not None:
        files = sorted([*files, *locked_context_files(lock, shared_distributions(image))], key=lambda f: f.target)
    return BuildPlan(
        name=image.name,
        repository=image.repository(),
        tag=image.tag,
        dockerfile=render_image(root, image, inputs),
        files=files,
        base_ref=base_ref_for(image),
        base_id=base_id,
        lock=lock,
    )


@dataclass(frozen=True)
class BuildPlan:
    """One image to build: what its context holds and what it is tagged."""

    name: str
    """For messages and the result: `pytorch:2.13-cpu`, `sidecar`."""
    repository: str
    tag: str
    """The moving tag; the immutable one appends the inputs hash."""
    dockerfile: str
    files: list[ContextFile]
    base_ref: str
    base_id: str
    lock: Lock | None = None
    """A locked build: its files come from the lock cache (fetched, then checked, before the context is made), and
    the built image is normalised (learnerkit_build.repro.reproducible), its content being fixed."""


def build_plan(
    root: Path,
    plan: BuildPlan,
    inputs: BuildInputs,
    on_line: LogSink,
    *,
    rebuild: bool,
    started: float,
    record_size: bool = False,
) -> BuildResult:
    """Build unless an image of the same inputs hash exists; tag it by version and by that hash."""
    digest = plan_digest(plan, inputs)
    done = None if rebuild else cached_result(root, plan, digest, started=started, record_size=record_size)
    if done is not None:
        return done
    return make_image(root, plan, digest, inputs, on_line, rebuild=rebuild, started=started, record_size=record_size)


def plan_digest(plan: BuildPlan, inputs: BuildInputs) -> str:
    return inputs_hash(plan.dockerfile, plan.files, plan.base_id, inputs)


def cached_result(
    root: Path, plan: BuildPlan, digest: str, *, started: float, record_size: bool = False
) -> BuildResult | None:
    """The `cached` result where an image of `digest` exists (its moving tag pointed at it), else None."""
    reference = f"{plan.repository}:{plan.tag}"
    immutable = f"{reference}-{digest[:12]}"
    existing = engineimages.image_id(immutable)
    if existing is None:
        return None
    if engineimages.image_id(reference) != existing:
        engineimages.tag_image(existing, plan.repository, plan.tag)
    if record_size:
        record_budget(root, plan.name, engineimages.image_size(existing))
    return BuildResult(plan.name, "cached", reference, immutable, existing, digest, time.monotonic() - started)


def make_image(
    root: Path,
    plan: BuildPlan,
    digest: str,
    inputs: BuildInputs,
    on_line: LogSink,
    *,
    rebuild: bool,
    started: float,
    record_size: bool = False,
) -> BuildResult:
    """Build `plan` and tag it by version and by `digest`. A locked plan's files are fetched where the cache lacks
    them (one image at a time: `image build` filled the cache for the whole selection first) and checked. A built
    image over its size budget (learnerkit_build.builds.sizebudget) is not tagged; `record_size` makes its size the
    budget instead."""
    reference = f"{plan.repository}:{plan.tag}"
    immutable = f"{reference}-{digest[:12]}"
    if plan.lock is not None:
        if missing(plan.lock):
            # The Debian and pip fetchers (docker-py, python-debian) are imported only where there is a file to fetch.
            from learnerkit_build.lock.compute import fill_cache

            fill_cache(plan.lock, plan.base_ref, inputs)
        check_cached(plan.lock)
    labels = {
        HASH_LABEL: digest,
        "org.opencontainers.image.base.name": plan.base_ref,
        "org.opencontainers.image.base.digest": plan.base_id,
        "org.opencontainers.image.revision": source_revision(root),
        "org.opencontainers.image.created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with tempfile.TemporaryDirectory(prefix="learnerkit-ctx-") as scratch:
        context = Path(scratch) / "context"
        assemble_context(context, plan.dockerfile, plan.files)
        secrets = build_secrets(Path(scratch), inputs)
        request = BuildRequest(context=context, image_name=plan.name, labels=labels, secrets=secrets, no_cache=rebuild)
        try:
            built = run_build(request, on_line)
        except BuildError as e:
            requirement = missing_distribution(e.log_tail)
            if requirement is None:
                raise
            raise BuildError(plan.name, missing_wheel_reason(requirement, inputs), e.log_tail) from e
    if plan.lock is not None:
        # docker-py, to save, load and remove images: imported only once an image was built.
        from learnerkit.common import engine
        from learnerkit_build.repro import reproducible

        on_line(
            f"normalising {built}: file times clamped and config dated to {reproducible.epoch_time(SOURCE_DATE_EPOCH)}"
        )
        normalised = reproducible.normalise_image(built, SOURCE_DATE_EPOCH)
        engine.remove_image(built)
        built = normalised
    size = engineimages.image_size(built)
    if record_size:
        record_budget(root, plan.name, size)
    else:
        check_size(root, plan.name, size)
    # Tags last: an interrupted or failed build leaves no tag, and the content tag comes before the moving one.
    engineimages.tag_image(built, plan.repository, f"{plan.tag}-{digest[:12]}")
    engineimages.tag_image(built, plan.repository, plan.tag)
    return BuildResult(plan.name, "built", reference, immutable, built, digest, time.monotonic() - started)


def _resolve_base(image: ImageSpec, on_line: LogSink) -> str | None:
    local = image.local_base
    if local:
        base_id, _ = ensure_base(recipe_for(local), on_line)
        return base_id
    return engineimages.image_id(image.variant.base)


def build_secrets(scratch: Path, inputs: BuildInputs) -> dict[str, Path]:
    """The pip.conf secret (always present, so RUN mounts never dangle) and the CA bundle if given."""
    lines = ["[global]"]
    links = ([WHEELHOUSE_MOUNT] if inputs.wheelhouses else []) + list(inputs.find_links)
    if links:
        lines.append(f"find-links = {' '.join(links)}")
    if inputs.ca_bundle is not None:
        lines.append("cert = /run/secrets/ca.pem")
    if inputs.index_url:
        lines.append(f"index-url = {inputs.index_url}")
    if inputs.extra_index_urls:
        lines.append(f"extra-index-url = {' '.join(inputs.extra_index_urls)}")
    pip_conf = scratch / "pip.conf"
    pip_conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pip_conf.chmod(0o600)
    secrets = {"pip_conf": pip_conf}
    if inputs.ca_bundle is not None:
        secrets["ca"] = inputs.ca_bundle
    return secrets


_NO_DISTRIBUTION = re.compile(r"No matching distribution found for (?P<requirement>\S+)")


def missing_distribution(log_tail: str) -> str | None:
    """The requirement pip found no distribution for, when that is why a build failed."""
    match = _NO_DISTRIBUTION.search(log_tail)
    return match["requirement"] if match else None


def missing_wheel_reason(requirement: str, inputs: BuildInputs) -> str:
    return (
        f"no index or find-links offers {requirement} (pip searched: {inputs.describe()}). Supply it with "
        "--find-links DIR|URL, --extra-index-url URL or --index-url URL ($LEARNERKIT_FIND_LINKS, "
        "$LEARNERKIT_EXTRA_INDEX_URLS, $LEARNERKIT_INDEX_URL), or in the host's pip configuration "
        "(`pip config set global.find-links DIR`)"
    )


SOURCE_REVISION_ENV = "LEARNERKIT_SOURCE_REVISION"
"""Names the revision of a source copy without git (a release archive, a CI system's copy of a commit), so its
images carry the commit's revision label and are the commit's images byte for byte."""


def source_revision(root: Path) -> str:
    """The project's git commit (`-dirty` with local changes); `$LEARNERKIT_SOURCE_REVISION` where it is set;
    `unknown` outside a git checkout."""
    given = os.environ.get(SOURCE_REVISION_ENV, "").strip()
    if given:
        return given
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}-dirty" if dirty else rev
