"""The user's model code (FfDL's model definition): a folder zipped to a file, and the checks an archive passes
before it is stored. `job validate`, `job submit` and the scheduler run the same :func:`check_model_archive`.

The sidecar expands the archive into ``MODEL_DIR`` with its own, stricter extraction (it counts the bytes
it writes); these checks read only the zip's directory, so a bad archive is refused before anything is stored.
"""

from __future__ import annotations

import os
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from controller_sidecar.errors import UnsafePathError
from controller_sidecar.requirements import REQUIREMENTS, RequirementError, check_requirements
from controller_sidecar.safepaths import relative_parts
from learnerkit.scheduler.errors import ModelCodeError

MAX_REQUIREMENTS_BYTES = 64 * 1024
DEFAULT_MAX_EXPANDED_BYTES = 2 << 30
"""The sidecar's own limit on what an archive expands to (``limits.max_archive_bytes``)."""
DEFAULT_MAX_MEMBERS = 100_000
DEFAULT_MAX_DIRECTORY_BYTES = 16 << 20
"""From the zip's directory to its end: 100,000 members (the limit) with names of 120 bytes on average. The
scheduler keeps only this much of an upload's end to check it (``zipwindow.py``)."""


class SeekableBytes(Protocol):
    """A zip read from something other than a file (what ``zipfile`` needs of it)."""

    def seekable(self) -> bool: ...
    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int: ...
    def tell(self) -> int: ...
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class ModelSummary:
    files: int
    expanded_bytes: int
    """The sum of the members' declared sizes."""
    requirements: tuple[str, ...]
    """The lines of ``requirements.txt`` that name a package (comments and blank lines left out)."""


def zip_folder(folder: Path, dest: Path) -> int:
    """Write ``folder``'s files into the zip ``dest`` (streamed from disk); the number of files.

    Refuses (naming the path) an empty folder, links and special files: the sidecar would refuse them too.
    """
    count = 0
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        for current, dirs, files in os.walk(folder, followlinks=False):
            dirs.sort()
            for name in [*dirs, *sorted(files)]:
                path = Path(current) / name
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise ModelCodeError(f"{path}: links and special files cannot be part of the model code")
                if stat.S_ISREG(mode):
                    archive.write(path, path.relative_to(folder).as_posix())
                    count += 1
    if count == 0:
        dest.unlink(missing_ok=True)
        raise ModelCodeError(f"{folder}: the model folder has no files")
    return count


def model_archive(model: Path, workdir: Path) -> Path:
    """``model`` as a zip: itself when it is a file, else a zip of the folder written into ``workdir``."""
    if model.is_dir():
        target = Path(tempfile.mkstemp(prefix="model-", suffix=".zip", dir=workdir)[1])
        zip_folder(model, target)
        return target
    if not model.is_file():
        raise ModelCodeError(f"{model}: no such file or folder")
    return model


def check_model_archive(
    archive: Path | SeekableBytes,
    *,
    name: str | None = None,
    max_expanded_bytes: int = DEFAULT_MAX_EXPANDED_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
    max_directory_bytes: int = DEFAULT_MAX_DIRECTORY_BYTES,
    locked: Mapping[str, str] | None = None,
) -> ModelSummary:
    """Refuse, naming the member, what the sidecar's extraction would refuse, as far as the zip's directory
    tells, and each ``requirements.txt`` line pip must not get (the sidecar's own check), or that would replace
    one of the learner image's ``locked`` packages. ``name``: the archive's name in errors."""
    shown = name or str(archive)
    if not zipfile.is_zipfile(archive):
        raise ModelCodeError(f"{shown}: not a zip archive (a model is a folder or a .zip)")
    try:
        with zipfile.ZipFile(archive) as zf:
            _check_directory_size(zf, archive, shown, max_directory_bytes)
            infos = zf.infolist()
            files, expanded = _check_members(infos, shown, max_expanded_bytes, max_members)
            requirements = _read_requirements(zf, shown, locked or {})
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ModelCodeError(f"{shown}: corrupt zip archive ({e})") from e
    return ModelSummary(files, expanded, requirements)


def _check_directory_size(zf: zipfile.ZipFile, archive: Path | SeekableBytes, shown: str, max_bytes: int) -> None:
    end = archive.stat().st_size if isinstance(archive, Path) else archive.seek(0, os.SEEK_END)
    size = end - zf.start_dir
    if size > max_bytes:
        raise ModelCodeError(
            f"{shown}: its directory (with what follows it) is {size} bytes, over the limit of {max_bytes}: "
            "fewer members or shorter names"
        )


def _check_members(infos: list[zipfile.ZipInfo], shown: str, max_bytes: int, max_members: int) -> tuple[int, int]:
    if len(infos) > max_members:
        raise ModelCodeError(f"{shown}: {len(infos)} members, more than the limit of {max_members}")
    files = expanded = 0
    tree = _Tree(shown)
    for info in infos:
        what = f"{shown}: member {info.filename!r}"
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise ModelCodeError(f"{what} is a link or special file")
        try:
            parts = relative_parts(info.filename.rstrip("/") if info.is_dir() else info.filename, what=what)
        except UnsafePathError as e:
            raise ModelCodeError(str(e)) from e
        tree.add(info.filename, parts, folder=info.is_dir())
        if info.flag_bits & 0x1:
            raise ModelCodeError(f"{what} is encrypted")
        if not info.is_dir():
            files += 1
            expanded += info.file_size
        if expanded > max_bytes:
            raise ModelCodeError(f"{shown}: expands to more than {max_bytes} bytes (at member {info.filename!r})")
    if files == 0:
        raise ModelCodeError(f"{shown}: the archive has no files")
    return files, expanded


class _Tree:
    """The paths an archive's members expand to: two members at one path would leave only the one written
    last (the sidecar refuses that), and a file cannot hold another member."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.files: dict[tuple[str, ...], str] = {}
        self.folders: set[tuple[str, ...]] = set()

    def add(self, name: str, parts: tuple[str, ...], *, folder: bool) -> None:
        what = f"{self.shown}: member {name!r}"
        for depth in range(1, len(parts)):
            above = self.files.get(parts[:depth])
            if above is not None:
                raise ModelCodeError(f"{what} inside the file {above!r}: a file holds no members")
            self.folders.add(parts[:depth])
        if folder:
            if parts in self.files:
                raise ModelCodeError(f"{what}: {self.files[parts]!r} is a file and a folder")
            self.folders.add(parts)
        elif parts in self.files:
            raise ModelCodeError(f"{what} twice in the archive: only one of them could be expanded")
        elif parts in self.folders:
            raise ModelCodeError(f"{what}: {name!r} is a file and a folder")
        else:
            self.files[parts] = name


def _read_requirements(zf: zipfile.ZipFile, shown: str, locked: Mapping[str, str]) -> tuple[str, ...]:
    try:
        info = zf.getinfo(REQUIREMENTS)
    except KeyError:
        return ()
    if info.file_size > MAX_REQUIREMENTS_BYTES:
        raise ModelCodeError(f"{shown}: {REQUIREMENTS} is over {MAX_REQUIREMENTS_BYTES} bytes")
    with zf.open(info) as stream:
        raw = stream.read(MAX_REQUIREMENTS_BYTES + 1)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelCodeError(f"{shown}: {REQUIREMENTS} is not UTF-8 text ({e})") from e
    try:
        return check_requirements(text, f"{shown}: {REQUIREMENTS}", locked)
    except RequirementError as e:
        raise ModelCodeError(str(e)) from e
