"""`learnerkit image outdated`: built images with pending Debian security updates or a changed base."""

from __future__ import annotations

from dataclasses import dataclass, field

from learnerkit.common import engine
from learnerkit_build.recipes.spec import ImageSpec
from learnerkit_build.scan.debian_security import DebianIndexError, pending_updates, suite_index
from learnerkit_build.scan.packages import DebPackage, parse_dpkg_status
from learnerkit_build.scan.sbom import BASE_DIGEST_LABEL, BASE_LABEL

MOVING_BASE_TAG = {"learnerkit/base": "learnerkit/base:debian-bookworm"}


@dataclass(frozen=True)
class OutdatedImage:
    spec: str
    reference: str
    image_id: str
    reasons: list[str] = field(default_factory=list)

    @property
    def outdated(self) -> bool:
        return bool(self.reasons)


def check_image(image: ImageSpec) -> OutdatedImage | None:
    reference = f"{image.repository()}:{image.tag}"
    image_id = engine.image_id(reference)
    if image_id is None:
        return None
    reasons = base_reasons(reference)
    status = engine.read_file(reference, "/var/lib/dpkg/status")
    release = engine.read_file(reference, "/etc/os-release") or b""
    codename = next(
        (
            line.split("=", 1)[1].strip('"')
            for line in release.decode().splitlines()
            if line.startswith("VERSION_CODENAME=")
        ),
        None,
    )
    if status is not None and codename:
        installed: list[DebPackage] = parse_dpkg_status(status.decode("utf-8", errors="replace"))
        arch = str(engine.image_attrs(reference).get("Architecture") or "amd64")
        try:
            index = suite_index("security", f"{codename}-security", arch)
            pending = pending_updates(installed, index)
            reasons += [f"security update {p.name} {p.version} -> {e.version}" for p, e in pending]
        except DebianIndexError as e:
            reasons.append(f"pending security updates unknown: {e}")
    return OutdatedImage(image.name, reference, image_id, reasons)


def base_reasons(reference: str) -> list[str]:
    """Why the image's base is not the one it was built on any more (empty when it still is)."""
    labels = engine.image_labels(reference)
    name, built_on = labels.get(BASE_LABEL), labels.get(BASE_DIGEST_LABEL)
    if not name or not built_on:
        return ["no base labels: cannot tell whether the base changed"]
    current = engine.image_id(name)
    moving = MOVING_BASE_TAG.get(name.split(":")[0])
    newest = engine.image_id(moving) if moving else None
    if current is None:
        return [f"base {name} is no longer on this engine"]
    if current != built_on:
        return [f"base {name} is now {current[:19]}, built on {built_on[:19]}"]
    if newest is not None and newest != built_on:
        return [f"a newer base {moving} ({newest[:19]}) exists"]
    return []


def outdated_images(images: list[ImageSpec]) -> list[OutdatedImage]:
    return [found for image in images if (found := check_image(image)) is not None]
