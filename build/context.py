"""The build context of one image and the content hash of every input that goes into it.

The same file list feeds both the hash and the context folder, so nothing can reach an image without
changing its hash. The hash is the image's immutable tag: an image whose hash is already tagged is not
rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from learnerkit_build.render import BuildInputs
from learnerkit_build.spec import ImageSpec

HASH_SCHEME = "learnerkit-inputs/1"
WHEELHOUSE_DIR = ".wheelhouse"
_SKIP_NAMES = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class ContextFile:
    source: Path
    """Where the file is on this machine."""
    target: str
    """Its path inside the build context."""


def context_files(root: Path, image: ImageSpec, inputs: BuildInputs) -> list[ContextFile]:
    """Every file the build context of `image` holds, sorted by target path."""
    files = [
        *tree_files(root / "learner_base", "learner_base"),
        *tree_files(image.folder, f"frameworks/{image.folder.name}"),
    ]
    if inputs.wheelhouse is not None:
        files.extend(tree_files(inputs.wheelhouse, WHEELHOUSE_DIR))
    return sorted(files, key=lambda f: f.target)


def tree_files(folder: Path, prefix: str) -> Iterator[ContextFile]:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_NAMES)
        for filename in sorted(filenames):
            if filename.endswith(_SKIP_SUFFIXES):
                continue
            source = Path(dirpath) / filename
            yield ContextFile(source=source, target=f"{prefix}/{source.relative_to(folder).as_posix()}")


def inputs_hash(dockerfile: str, files: list[ContextFile], base_image_id: str, inputs: BuildInputs) -> str:
    """sha256 over the rendered Dockerfile, every context file (path, mode, content), the base image ID
    and the index URL (without credentials). The CA bundle is transport only and is left out."""
    digest = hashlib.sha256()

    def field(name: str, value: bytes) -> None:
        digest.update(name.encode() + b"\0" + str(len(value)).encode() + b"\0" + value)

    field("scheme", HASH_SCHEME.encode())
    field("dockerfile", dockerfile.encode())
    field("base", base_image_id.encode())
    field("index", _without_credentials(inputs.index_url).encode())
    for item in files:
        field("path", item.target.encode())
        field("mode", oct(item.source.stat().st_mode & 0o777).encode())
        field("content", file_sha256(item.source).encode())
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _without_credentials(url: str | None) -> str:
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def assemble_context(folder: Path, dockerfile: str, files: list[ContextFile]) -> None:
    """Write the context into an empty `folder`: hard links where possible (wheelhouses are large)."""
    (folder / WHEELHOUSE_DIR).mkdir(parents=True, exist_ok=True)
    for item in files:
        target = folder / item.target
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(item.source, target)
        except OSError:
            shutil.copy2(item.source, target)
    (folder / "Dockerfile").write_text(dockerfile, encoding="utf-8")
