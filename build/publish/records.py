"""The publish record: what `image publish` pushed for an image ID on this host (the registry reference, the
manifest digest, when, where its signed statements were attached, the key that signed), kept beside the test and
scan records so the console and `image ls` say whether an image is published without asking a registry.

One record per image ID, the last successful publish of it (a publish of the same ID to another registry replaces
it); written atomically, and only once everything was pushed and signed."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from learnerkit_build.errors import BuildToolError
from learnerkit_build.state import id_file_name, read_json, state_home, write_json

PublishStateName = Literal["published", "not published", "rebuilt since"]
"""`rebuilt since`: the reference was published, but the engine's image of it now has another image ID."""


@dataclass(frozen=True)
class RecordedAttestation:
    kind: str
    predicate_type: str
    manifest: str
    """The digest of the referrer manifest that carries the signed statement."""


@dataclass(frozen=True)
class PublishRecord:
    image_id: str
    reference: str
    """The local reference published (``learnerkit/pytorch:2.13-cpu-py3.12``): how the Images view finds it."""
    pushed: str
    """``registry/repository:tag``."""
    digest: str
    """The manifest digest the registry serves."""
    published_at: str
    discovery: str
    """Where the statements were attached: ``referrers-api``, or ``tag-schema`` (the referrers tag)."""
    signature: str
    """The digest of cosign's ``.sig`` manifest."""
    key_id: str
    attestations: tuple[RecordedAttestation, ...]

    @property
    def pinned(self) -> str:
        """``registry/repository:tag@sha256:...``: what to pull to get exactly what was published."""
        return f"{self.pushed}@{self.digest}"


@dataclass(frozen=True)
class PublishState:
    state: PublishStateName
    record: PublishRecord | None
    """The publish the state is about: of this image ID, or (rebuilt since) of the reference's earlier image."""


def publishes_home() -> Path:
    return state_home() / "image-publishes"


def record_publish(record: PublishRecord) -> Path:
    path = publishes_home() / f"{id_file_name(record.image_id)}.json"
    write_json(path, asdict(record))
    return path


def load_publish_record(image_id: str) -> PublishRecord | None:
    return _load(publishes_home() / f"{id_file_name(image_id)}.json")


def last_publish_of(reference: str) -> PublishRecord | None:
    """The newest publish record of the local reference, whatever its image ID."""
    found = [r for r in map(_load, sorted(publishes_home().glob("*.json"))) if r]
    return max((r for r in found if r.reference == reference), key=lambda r: r.published_at, default=None)


def publish_state(reference: str, image_id: str | None) -> PublishState:
    """Published (this image ID, or the reference's last publish where the engine has no image of it), not
    published, or rebuilt since (the reference was published as another image ID than the engine's now)."""
    exact = load_publish_record(image_id) if image_id else None
    if exact is not None:
        return PublishState("published", exact)
    earlier = last_publish_of(reference)
    if earlier is None:
        return PublishState("not published", None)
    return PublishState("published" if image_id is None else "rebuilt since", earlier)


def _load(path: Path) -> PublishRecord | None:
    raw: Any = read_json(path)
    if raw is None:
        return None
    try:
        attestations = tuple(RecordedAttestation(**a) for a in raw["attestations"])
        return PublishRecord(**{**raw, "attestations": attestations})
    except (KeyError, TypeError) as e:
        raise BuildToolError(f"{path}: not a publish record ({e})") from e
