"""The sidecar image every job of this scheduler runs, pinned once as the scheduler starts.

``learnerkit/sidecar:<version>`` is a tag every build of the sidecar moves (one per checkout, on a shared engine),
so deploying by it would run whichever build came last. The scheduler reads what the tag names when it starts and
deploys that: the image ID on Docker, and on Kubernetes, which pulls by name, the image's registry digest
(``repo@sha256:...``) or else the build tool's content tag (``<version>-<inputs hash>``, the hash the image's
label records), which no other build moves. A reference already pinned (an image ID, or a name with a digest)
is taken as it is.
"""

from __future__ import annotations

import re

from learnerkit.common import engine
from learnerkit.common.engine import EngineError
from learnerkit.scheduler.errors import SettingsError
from learnerkit_build.builds.images import HASH_LABEL

_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
_DIGESTED = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")


def repository_of(reference: str) -> str:
    """``registry:5000/learnerkit/sidecar:0.1.0`` -> ``registry:5000/learnerkit/sidecar`` (a port is no tag)."""
    name, colon, tag = reference.rpartition(":")
    return name if colon and "/" not in tag else reference


def is_pinned(reference: str) -> bool:
    return bool(_IMAGE_ID.fullmatch(reference) or _DIGESTED.fullmatch(reference))


def pin_sidecar(reference: str, *, by_id: bool) -> str:
    """What the scheduler deploys for ``reference``: its image ID (``by_id``, the Docker backend), else its
    digest or content tag. Refuses (naming `LEARNERKIT_SIDECAR_IMAGE`) an image this engine does not have."""
    if is_pinned(reference):
        return reference
    try:
        attrs = engine.image_attrs(reference)
    except EngineError as e:
        raise SettingsError(
            f"the sidecar image {reference} cannot be pinned: {e}. Build it (`learnerkit sidecar build`), or name "
            "it by digest (repo@sha256:...) in LEARNERKIT_SIDECAR_IMAGE"
        ) from e
    if by_id:
        return str(attrs["Id"])
    repository = repository_of(reference)
    digests = sorted(d for d in attrs.get("RepoDigests") or () if d.partition("@")[0] == repository)
    inputs = ((attrs.get("Config") or {}).get("Labels") or {}).get(HASH_LABEL)
    content = sorted(
        t for t in attrs.get("RepoTags") or () if inputs and repository_of(t) == repository and t.endswith(inputs[:12])
    )
    if digests or content:
        return str((digests or content)[0])
    raise SettingsError(
        f"the sidecar image {reference} has neither a registry digest nor a content tag (<version>-<hash>) to "
        "deploy it by: push it, or build it with `learnerkit sidecar build`, or name it by digest in "
        "LEARNERKIT_SIDECAR_IMAGE"
    )
