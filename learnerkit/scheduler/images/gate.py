"""Which learner images the scheduler runs: those that passed the project's test and scan gates on this host
(the records `learnerkit image test` and `learnerkit image scan` keep under ``$LEARNERKIT_HOME``, the same
check `image publish` makes), and those its settings trust: allowlist patterns, or the images of this
project's own build matrix in a development setup. A refusal names the gate's verdict and the manifest field.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from fnmatch import fnmatchcase
from pathlib import Path

from learnerkit.common.engine import EngineError
from learnerkit.common.yamlfile import Problem
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit_build.publish import PublishRefused, check_gates

GateCheck = Callable[[str], object]
"""Raises `PublishRefused` naming the verdict unless the image passed its test and scan gates."""
ImageResolver = Callable[[JobManifest], str]


def _passed_gates(reference: str) -> object:
    return check_gates(reference)


class ImageGate:
    def __init__(
        self, allowlist: Collection[str] = (), trusted: Collection[str] = (), check: GateCheck = _passed_gates
    ) -> None:
        self.allowlist = tuple(allowlist)
        """fnmatch patterns (``registry.local/team/*:*``) of images that run without the gates."""
        self.trusted = frozenset(trusted)
        """Exact references that run without the gates: this project's own images in a dev setup."""
        self.check = check

    def verdict(self, reference: str) -> str | None:
        """None when the image may run; else why not, in the gate's words."""
        if reference in self.trusted or any(fnmatchcase(reference, pattern) for pattern in self.allowlist):
            return None
        try:
            self.check(reference)
        except PublishRefused as e:
            return str(e)
        except EngineError as e:
            return f"the image cannot be inspected: {e}"
        return None

    def gated(self, resolve: ImageResolver) -> ImageResolver:
        """``resolve``, refusing (`ManifestError` naming the field) an image that may not run."""

        def resolve_gated(manifest: JobManifest) -> str:
            image = resolve(manifest)
            why = self.verdict(image)
            if why is not None:
                field = ("learnerkit", "image") if manifest.extensions.image else ("framework", "version")
                message = f"image {image} may not run here: {why} (or list it in LEARNERKIT_IMAGE_ALLOWLIST)"
                raise ManifestError([Problem(Path("manifest"), None, field, message)])
            return image

        return resolve_gated
