"""The lock file: what an image holds, each package named by version and the sha256 of its .deb or wheel.

A lock is canonical JSON (sorted keys, sorted entries), written atomically, so that computing it again
from the same archive state gives the same bytes and a review shows exactly what moved. An image compiled in a
builder stage has a `builder` section too: what that stage installs, which never reaches the image itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from learnerkit_build.errors import BuildToolError
from learnerkit_build.state import PROJECT_FILE_MODE, write_atomic

LOCK_SCHEME = "learnerkit-lock/1"
DebOrigin = Literal["base", "image"]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_Entry = TypeVar("_Entry", "LockedDeb", "LockedWheel", "LockedSource")
_Dist = TypeVar("_Dist", bound="LockedWheel")
_BUILDER_SECTIONS = ("debian", "python", "sources")


class LockError(BuildToolError):
    """A lock file is missing, malformed, or does not describe what was built."""


@dataclass(frozen=True)
class LockedDeb:
    package: str
    version: str
    architecture: str
    filename: str
    """The .deb's name in the content-addressed cache and the build context."""
    sha256: str
    origin: DebOrigin
    """`base`: the local base holds it; `image`: the image's own install step adds it."""


@dataclass(frozen=True)
class LockedWheel:
    name: str
    """Normalised (PEP 503)."""
    version: str
    filename: str
    sha256: str


@dataclass(frozen=True)
class LockedSource(LockedWheel):
    """A source distribution a builder stage compiles (an sdist: `name-version.tar.gz`), named as a wheel is."""


@dataclass(frozen=True)
class BuilderLock:
    """What a builder stage installs on the image's base: the .debs it adds to the base (origin `image`; the base's
    own are the lock's), the wheels of its venv, and the source distributions it compiles."""

    debian: tuple[LockedDeb, ...]
    python: tuple[LockedWheel, ...]
    sources: tuple[LockedSource, ...]

    def files(self) -> list[tuple[str, str]]:
        return [(d.filename, d.sha256) for d in self.debian] + [
            (f.filename, f.sha256) for f in (*self.python, *self.sources)
        ]

    def python_list(self) -> str:
        """`name==version` per line, sorted: the distributions the builder's venv must hold, no more."""
        return _python_list(self.python)


@dataclass(frozen=True)
class Lock:
    image: str
    """What the lock is of: `sidecar`, `base:debian-bookworm`, `mxnet:1.9.1-cpu`."""
    debian: tuple[LockedDeb, ...]
    python: tuple[LockedWheel, ...]
    builder: BuilderLock | None = None
    """An image compiled in a builder stage: what that stage installs."""

    def installed_debs(self) -> tuple[LockedDeb, ...]:
        return tuple(deb for deb in self.debian if deb.origin == "image")

    def files(self) -> list[tuple[str, str]]:
        """(filename, sha256) of every file a build installs: the image's own .debs, every wheel, and the builder's."""
        own = [(d.filename, d.sha256) for d in self.installed_debs()] + [(w.filename, w.sha256) for w in self.python]
        return own + (self.builder.files() if self.builder else [])

    def dpkg_list(self) -> str:
        """`package=version` per line, sorted: what `dpkg-query` must print in the built image."""
        return "".join(sorted(f"{deb.package}={deb.version}\n" for deb in self.debian))

    def builder_dpkg_list(self) -> str:
        """What `dpkg-query` must print in the builder stage: the base's packages, those the builder installs in
        their place (an upgrade) or beside them."""
        added = self.builder.debian if self.builder else ()
        replaced = {deb.package for deb in added}
        kept = [deb for deb in self.debian if deb.origin == "base" and deb.package not in replaced]
        return "".join(sorted(f"{deb.package}={deb.version}\n" for deb in (*kept, *added)))

    def wheels_split(self, names: Collection[str]) -> tuple[tuple[LockedWheel, ...], tuple[LockedWheel, ...]]:
        """The locked wheels of the distributions `names` (normalised), and the others."""
        return (
            tuple(w for w in self.python if w.name in names),
            tuple(w for w in self.python if w.name not in names),
        )

    def python_list(self) -> str:
        """`name==version` per line, sorted: the distributions the built venv must hold, no more."""
        return _python_list(self.python)


def _python_list(wheels: Iterable[LockedWheel]) -> str:
    return "".join(sorted(f"{w.name}=={w.version}\n" for w in wheels))


def pip_requirements(wheels: Iterable[LockedWheel]) -> str:
    """A `--require-hashes` requirements file of `wheels`."""
    return "".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n" for w in wheels)


def normalise_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make_lock(
    image: str, debian: list[LockedDeb], python: list[LockedWheel], builder: BuilderLock | None = None
) -> Lock:
    return Lock(image=image, debian=_sorted_debs(debian), python=_sorted_dists(python), builder=builder)


def make_builder(debian: list[LockedDeb], python: list[LockedWheel], sources: list[LockedSource]) -> BuilderLock:
    return BuilderLock(debian=_sorted_debs(debian), python=_sorted_dists(python), sources=_sorted_dists(sources))


def _sorted_debs(debs: list[LockedDeb]) -> tuple[LockedDeb, ...]:
    return tuple(sorted(debs, key=lambda d: (d.package, d.architecture)))


def _sorted_dists(dists: list[_Dist]) -> tuple[_Dist, ...]:
    return tuple(sorted(dists, key=lambda w: w.name))


def lock_json(lock: Lock) -> bytes:
    """Canonical JSON; a lock without a builder has no `builder` key (the bytes of every lock made before it)."""
    payload: dict[str, Any] = {
        "scheme": LOCK_SCHEME,
        "image": lock.image,
        "debian": [asdict(deb) for deb in lock.debian],
        "python": [asdict(wheel) for wheel in lock.python],
    }
    if lock.builder is not None:
        payload["builder"] = {
            section: [asdict(f) for f in getattr(lock.builder, section)] for section in _BUILDER_SECTIONS
        }
    return (json.dumps(payload, indent=1, sort_keys=True) + "\n").encode()


def write_lock(path: Path, lock: Lock) -> None:
    write_atomic(path, lock_json(lock), PROJECT_FILE_MODE)


def read_lock(path: Path) -> Lock:
    """The lock at `path`; `LockError` names the file and the entry when it is malformed."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise LockError(f"{path}: no lock file (make it with `learnerkit image lock`)") from e
    except (OSError, json.JSONDecodeError) as e:
        raise LockError(f"{path}: not a readable lock file: {e}") from e
    if not isinstance(payload, dict) or payload.get("scheme") != LOCK_SCHEME:
        raise LockError(f"{path}: scheme is not {LOCK_SCHEME!r}")
    debian = [_entry(path, "debian", i, raw, LockedDeb) for i, raw in enumerate(payload.get("debian", []))]
    python = [_entry(path, "python", i, raw, LockedWheel) for i, raw in enumerate(payload.get("python", []))]
    for deb in debian:
        if deb.origin not in ("base", "image"):
            raise LockError(f"{path}: debian entry {deb.package}: origin must be base or image, not {deb.origin!r}")
    builder = _builder(path, payload["builder"]) if "builder" in payload else None
    return make_lock(str(payload.get("image", "")), debian, python, builder)


def _builder(path: Path, raw: Any) -> BuilderLock:
    if (
        not isinstance(raw, dict)
        or set(raw) != set(_BUILDER_SECTIONS)
        or not all(isinstance(v, list) for v in raw.values())
    ):
        raise LockError(f"{path}: builder must have exactly the lists {', '.join(_BUILDER_SECTIONS)}")
    debian = [_entry(path, "builder.debian", i, item, LockedDeb) for i, item in enumerate(raw["debian"])]
    for deb in debian:
        if deb.origin != "image":
            raise LockError(
                f"{path}: builder.debian entry {deb.package}: origin must be image (the base's packages are the "
                f"lock's own), not {deb.origin!r}"
            )
    python = [_entry(path, "builder.python", i, item, LockedWheel) for i, item in enumerate(raw["python"])]
    sources = [_entry(path, "builder.sources", i, item, LockedSource) for i, item in enumerate(raw["sources"])]
    return make_builder(debian, python, sources)


def _entry(path: Path, section: str, index: int, raw: Any, kind: type[_Entry]) -> _Entry:
    fields = set(kind.__dataclass_fields__)
    if not isinstance(raw, dict) or set(raw) != fields or not all(isinstance(v, str) for v in raw.values()):
        raise LockError(f"{path}: {section}[{index}] must have exactly the string fields {', '.join(sorted(fields))}")
    if not _SHA256.match(raw["sha256"]):
        raise LockError(f"{path}: {section}[{index}] ({raw['filename']}): sha256 is not 64 hex digits")
    if "/" in raw["filename"] or raw["filename"].startswith("."):
        raise LockError(f"{path}: {section}[{index}]: filename {raw['filename']!r} is not a plain file name")
    return kind(**raw)
