"""Which learner images the scheduler runs: those that passed the project's test and scan gates on this host
(the records `learnerkit image test` and `learnerkit image scan` keep under ``$LEARNERKIT_HOME``, the same
check `image publish` makes), and those its settings trust: allowlist patterns, or the images of this
project's own build matrix in a development setup. A refusal names the gate's verdict and the manifest field.
With ``pin_ids`` (the Docker backend) an image the gate checked is deployed by the image ID it checked, so a
tag moved after the check cannot swap what runs; Kubernetes pulls by reference, so it keeps the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from fnmatch import fnmatchcase
from pathlib import Path

from learnerkit.common.engine import EngineError
from learnerkit.common.yamlfile import Problem
from learnerkit.scheduler.errors import JobStateError, ManifestError
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit_build.publish.push import PublishRefused, check_gates

GateCheck = Callable[[str], object]
"""Raises `PublishRefused` naming the verdict unless the image passed its test and scan gates; returns the image
ID it checked (``sha256:...``) where it knows one."""
ImageResolver = Callable[[JobManifest], str]


def _passed_gates(reference: str) -> object:
    return check_gates(reference).image_id


class ImageGate:
    def __init__(
        self,
        allowlist: Collection[str] = (),
        trusted: Collection[str] = (),
        check: GateCheck = _passed_gates,
        *,
        pin_ids: bool = False,
    ) -> None:
        self.allowlist = tuple(allowlist)
        """fnmatch patterns (``registry.local/team/*:*``) of images that run without the gates."""
        self.trusted = frozenset(trusted)
        """Exact references that run without the gates: this project's own images in a dev setup."""
        self.check = check
        self.pin_ids = pin_ids
        self._checked_as: dict[str, str] = {}
        """Image ID -> the reference the gate checked it as."""

    def verdict(self, reference: str) -> str | None:
        """None when the image may run; else why not, in the gate's words."""
        return self._checked(reference)[0]

    def named(self, image: str) -> str:
        """The reference an image ID this gate returned was checked as; any other image as it is."""
        return self._checked_as.get(image, image)

    def _checked(self, reference: str) -> tuple[str | None, str | None]:
        """The verdict, and the image ID the check passed (None where it was not checked or names none)."""
        if reference in self.trusted or any(fnmatchcase(reference, pattern) for pattern in self.allowlist):
            return None, None
        try:
            image_id = self.check(reference)
        except PublishRefused as e:
            return str(e), None
        except EngineError as e:
            return f"the image cannot be inspected: {e}", None
        return None, image_id if isinstance(image_id, str) and image_id.startswith("sha256:") else None

    def gated(self, resolve: ImageResolver) -> ImageResolver:
        """``resolve``, refusing (`ManifestError` naming the field) an image that may not run."""

        def resolve_gated(manifest: JobManifest) -> str:
            image = resolve(manifest)
            why, image_id = self._checked(image)
            if why is not None:
                field = ("learnerkit", "image") if manifest.extensions.image else ("framework", "version")
                message = f"image {image} may not run here: {why} (or list it in LEARNERKIT_IMAGE_ALLOWLIST)"
                raise ManifestError([Problem(Path("manifest"), None, field, message)])
            if self.pin_ids and image_id is not None:
                self._checked_as[image_id] = image
                return image_id
            return image

        return resolve_gated

    def gated_evaluator(self, resolve: Callable[[str], str]) -> Callable[[str], str]:
        """``resolve`` (an evaluation's kind to its evaluator image), refusing (`JobStateError`) an image that
        may not run, like a learner image."""

        def resolve_gated(kind: str) -> str:
            image = resolve(kind)
            why, image_id = self._checked(image)
            if why is not None:
                raise JobStateError(f"evaluator image {image} may not run here: {why}")
            if self.pin_ids and image_id is not None:
                self._checked_as[image_id] = image
                return image_id
            return image

        return resolve_gated
