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

from learnerkit_build.recipes.filehashes import file_sha256
from learnerkit_build.recipes.render import BuildInputs, without_credentials
from learnerkit_build.recipes.spec import ImageSpec

HASH_SCHEME = "learnerkit-inputs/2"
WHEELHOUSE_DIR = ".wheelhouse"
_SKIP_NAMES = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class ContextFile:
    source: Path
    """Where the file is on this machine."""
    target: str
    """Its path inside the build context."""
    sha256: str | None = None
    """Its content's sha256 where known without reading it (a lock cache entry, named by it): an image's inputs
    hash is then known before the cache is filled, so only the images that will build fill it."""


def context_files(root: Path, image: ImageSpec, inputs: BuildInputs) -> list[ContextFile]:
    """Every file the build context of `image` holds, sorted by target path."""
    files = [
        *tree_files(root / "learner_base", "learner_base"),
        *tree_files(image.folder, f"frameworks/{image.folder.name}"),
    ]
    files.extend(wheelhouse_files(inputs))
    return sorted(files, key=lambda f: f.target)


def wheelhouse_files(inputs: BuildInputs) -> list[ContextFile]:
    """The files of every wheelhouse in one `.wheelhouse/` folder. Only each folder's own files: pip reads no
    subfolders of a find-links folder. A name in two folders comes from the first, as pip's first match would."""
    found: dict[str, ContextFile] = {}
    for folder in inputs.wheelhouses:
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.name not in found:
                found[path.name] = ContextFile(source=path, target=f"{WHEELHOUSE_DIR}/{path.name}")
    return list(found.values())


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
    and where pip looks (index, extra indexes and find-links URLs, without credentials). The CA bundle is
    transport only and is left out."""
    digest = hashlib.sha256()

    def field(name: str, value: bytes) -> None:
        digest.update(name.encode() + b"\0" + str(len(value)).encode() + b"\0" + value)

    field("scheme", HASH_SCHEME.encode())
    field("dockerfile", dockerfile.encode())
    field("base", base_image_id.encode())
    field("index", without_credentials(inputs.index_url).encode() if inputs.index_url else b"")
    for url in inputs.extra_index_urls:
        field("extra-index", without_credentials(url).encode())
    for link in inputs.find_links:
        field("find-links", without_credentials(link).encode())
    for item in files:
        field("path", item.target.encode())
        field("mode", oct(_mode(item)).encode())
        field("content", (item.sha256 or file_sha256(item.source)).encode())
    return digest.hexdigest()


def _mode(item: ContextFile) -> int:
    """The file's canonical mode; a lock cache entry not fetched yet will be 0644, as the cache writes each."""
    if item.sha256 is not None and not item.source.exists():
        return 0o644
    return canonical_mode(item.source.stat().st_mode)


def _linked(source: Path, target: Path) -> bool:
    try:
        os.link(source, target)
    except OSError:
        return False
    return True


def canonical_mode(mode: int) -> int:
    """What git records of a file's mode, executable or not: a checkout's umask never reaches an image."""
    return 0o755 if mode & 0o111 else 0o644


def assemble_context(folder: Path, dockerfile: str, files: list[ContextFile]) -> None:
    """Write the context into an empty `folder`: hard links where possible (wheelhouses are large), copies
    where a file's mode is not its canonical one; folders 0755, whatever the umask (COPY keeps modes)."""
    (folder / WHEELHOUSE_DIR).mkdir(parents=True, exist_ok=True)
    for item in files:
        target = folder / item.target
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = item.source.stat().st_mode & 0o777
        if mode == canonical_mode(mode) and _linked(item.source, target):
            continue
        shutil.copy2(item.source, target)
        target.chmod(canonical_mode(mode))
    for path in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        path.chmod(0o755)
    (folder / "Dockerfile").write_text(dockerfile, encoding="utf-8")
