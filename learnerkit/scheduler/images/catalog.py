"""Which learner image runs a manifest: its own (``learnerkit.image`` or FfDL's custom framework), or the
project's build of the named framework version, CPU variant without GPUs and CUDA with them. FfDL's names and
versions (`caffe2`, `latest`, `gpu`) are mapped as `learnerkit.scheduler.manifest.ffdlnames` says."""

from __future__ import annotations

from pathlib import Path

from learnerkit.common.errors import ConfigError
from learnerkit.scheduler.manifest.ffdlnames import means_newest, newest, version_key
from learnerkit.scheduler.manifest.kinds import installed_kinds
from learnerkit.scheduler.manifest.model import FrameworkCatalog, JobManifest
from learnerkit_build.lock.committed import image_lock
from learnerkit_build.recipes.matrix import load_matrix


class ImageCatalog:
    def __init__(self, root: Path, registry: str | None = None) -> None:
        self.matrix = load_matrix(root)
        self.kinds = installed_kinds(root)
        self.registry = registry

    def frameworks(self) -> FrameworkCatalog:
        """Framework -> the versions a manifest may name (`2.13`, `2.13-cpu`, the full tag)."""
        catalog: dict[str, set[str]] = {}
        for image in self.matrix.training_images:
            catalog.setdefault(image.framework.name, set()).update(
                {image.version, f"{image.version}-{image.variant_name}", image.tag}
            )
        return catalog

    def references(self) -> list[str]:
        """Every image of the matrix, as the scheduler runs it."""
        return [f"{image.repository(self.registry)}:{image.tag}" for image in self.matrix.images]

    def python_of(self, reference: str) -> str | None:
        """The Python version of an image of the matrix (``3.11``); None for any other image."""
        for image in self.matrix.images:
            if f"{image.repository(self.registry)}:{image.tag}" == reference:
                return str(image.python)
        return None

    def locked_of(self, reference: str) -> dict[str, str]:
        """The Python packages (normalised name -> version) of the committed lock of an image of the matrix, which
        a job's requirements may not replace; {} for any other image, or one without a lock."""
        for image in self.matrix.images:
            if f"{image.repository(self.registry)}:{image.tag}" == reference:
                lock = image_lock(image)
                return {wheel.name: wheel.version for wheel in lock.python} if lock is not None else {}
        return {}

    def evaluator(self, kind: str) -> str:
        """The evaluator image of an evaluation's kind: the image of the framework whose folder declares the kind
        (``frameworks/robustness/evaluation.yaml``; else the evaluator framework of the kind's name), at its newest
        version, CPU variant (an evaluation asks for no GPU)."""
        declared = self.kinds.get(kind)
        framework = declared.framework if declared is not None else kind
        images = [
            image
            for image in self.matrix.images
            if image.framework.name == framework
            and image.framework.smoke.kind == "evaluation"
            and image.variant.accelerator == "cpu"
        ]
        if not images:
            raise ConfigError(f"evaluation kind {kind}: no evaluator image in the matrix")
        image = max(images, key=lambda image: version_key(image.version))
        return f"{image.repository(self.registry)}:{image.tag}"

    def resolve(self, manifest: JobManifest) -> str:
        if manifest.image:
            return manifest.image
        accelerator = "cuda" if manifest.resources.gpus else "cpu"
        name, version = manifest.framework.target, manifest.framework.version
        versions = [image.version for image in self.matrix.images if image.framework.name == name]
        if versions and means_newest(manifest.framework.name, version):
            version = newest(versions)
        for image in self.matrix.images:
            if image.framework.name != name or version not in (
                image.version,
                f"{image.version}-{image.variant_name}",
                image.tag,
            ):
                continue
            if image.variant.accelerator == accelerator:
                return f"{image.repository(self.registry)}:{image.tag}"
        raise ConfigError(f"framework {name} {version}: no {accelerator} image in the matrix")
