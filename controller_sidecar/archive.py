"""Model code in: FfDL's ``model.zip`` (or a .tar / .tar.gz) expanded safely into a folder.

Refused, with UnsafePathError naming the member: names that would land outside the folder, links,
devices and other special members, more than ``max_members`` members, and more than ``max_bytes`` of
content. Sizes are counted on the bytes actually written, not on what the archive declares, so an archive
that lies about its sizes is caught too. Extraction goes into a temporary folder beside ``dest`` that is
renamed into place at the end: a refused or broken archive leaves nothing behind. Any other failure to
place a member (a file and a folder of one name, a name too long, an encrypted member) is a PermanentError
naming the member.
"""

from __future__ import annotations

import copy
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Generator, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO

from controller_sidecar.errors import PermanentError, UnsafePathError
from controller_sidecar.safepaths import relative_parts

_CHUNK = 256 * 1024


_Member = tuple[str, bool, IO[bytes] | None]
"""A member's name, whether it is executable, and its content (None for a folder)."""


class _Budget:
    def __init__(self, archive: Path, max_bytes: int) -> None:
        self.archive = archive
        self.max_bytes = max_bytes
        self.written = 0

    def copy(self, source: IO[bytes], target: Path, name: str) -> None:
        with target.open("xb") as out:
            while chunk := source.read(_CHUNK):
                self.written += len(chunk)
                if self.written > self.max_bytes:
                    raise UnsafePathError(
                        f"{self.archive}: member {name!r} takes the expanded size above {self.max_bytes} bytes"
                    )
                out.write(chunk)


def _zip_members(archive: Path, max_members: int) -> Generator[_Member, None, None]:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if len(infos) > max_members:
            raise UnsafePathError(f"{archive}: {len(infos)} members, more than the limit of {max_members}")
        for info in infos:
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise UnsafePathError(f"{archive}: member {info.filename!r} is a link or special file")
            if info.is_dir():
                yield info.filename, False, None
                continue
            # Read until the compressed data ends, not until the declared size: the budget counts what is real.
            unbounded = copy.copy(info)
            unbounded.file_size = 1 << 62
            try:
                opened = zf.open(unbounded)
            except (NotImplementedError, RuntimeError) as error:  # an unknown compression method, encryption
                raise PermanentError(f"{archive}: member {info.filename!r} cannot be read ({error})") from error
            with opened as stream:
                yield info.filename, bool(mode & 0o111), stream


def _tar_members(archive: Path, max_members: int) -> Generator[_Member, None, None]:
    with tarfile.open(archive, "r:*") as tf:
        for count, member in enumerate(tf, start=1):
            if count > max_members:
                raise UnsafePathError(f"{archive}: more members than the limit of {max_members}")
            if member.isdir():
                yield member.name, False, None
            elif member.isreg():
                stream = tf.extractfile(member)
                if stream is None:
                    raise PermanentError(f"{archive}: member {member.name!r} has no content")
                with stream:
                    yield member.name, bool(member.mode & 0o111), stream
            else:
                raise UnsafePathError(f"{archive}: member {member.name!r} is a link or special file")


def _strip_dot_slash(name: str) -> str:
    """``./src/a.py`` -> ``src/a.py``: tar archives made with ``tar -C dir .`` name every member so."""
    while name.startswith("./"):
        name = name[2:]
    return name


@contextmanager
def _staging(dest: Path) -> Iterator[Path]:
    """A temporary folder beside ``dest``, removed unless the caller moved it away."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.extract-", dir=dest.parent))
    try:
        yield temp
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _replace_dir(new: Path, dest: Path) -> None:
    """Put ``new`` at ``dest``; an existing ``dest`` is moved aside first and removed after."""
    if not dest.exists() and not dest.is_symlink():
        new.rename(dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
    dest.rename(old / dest.name)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def extract_archive(archive: Path, dest: Path, *, max_bytes: int, max_members: int) -> int:
    """Expand ``archive`` (zip, tar, tar.gz) into ``dest`` and return the bytes written.

    ``dest`` is replaced as a whole only after every member was checked and written.
    """
    if zipfile.is_zipfile(archive):
        members = _zip_members(archive, max_members)
    elif tarfile.is_tarfile(archive):
        members = _tar_members(archive, max_members)
    else:
        raise PermanentError(f"{archive}: not a zip or tar archive")
    budget = _Budget(archive, max_bytes)
    with _staging(dest) as temp, closing(members):
        content = temp / "content"
        content.mkdir()
        try:
            for name, executable, stream in members:
                what = f"{archive}: member {name!r}"
                relative = _strip_dot_slash(name)
                if stream is None and relative.rstrip("/") in ("", "."):
                    continue  # the archive's own root folder, as `tar -C dir .` writes it
                parts = relative_parts(relative.rstrip("/") if stream is None else relative, what=what)
                _place(content.joinpath(*parts), stream, executable, budget, name, what)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as error:
            raise PermanentError(f"{archive}: corrupt archive ({error})") from error
        try:
            _replace_dir(content, dest)
        except OSError as error:
            raise PermanentError(f"{archive}: cannot put the expanded archive at {dest}: {error}") from error
    return budget.written


def _place(target: Path, stream: IO[bytes] | None, executable: bool, budget: _Budget, name: str, what: str) -> None:
    """Write one member at ``target``; every failure names the member."""
    try:
        if stream is None:
            target.mkdir(parents=True, exist_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        budget.copy(stream, target, name)
        target.chmod(0o755 if executable else 0o644)
    except (FileExistsError, NotADirectoryError, IsADirectoryError) as error:
        raise UnsafePathError(f"{what}: clashes with another member (a file and a folder of one name)") from error
    except OSError as error:
        raise PermanentError(f"{what}: cannot be written ({error.strerror or error})") from error
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as error:
        raise PermanentError(f"{what}: corrupt ({error})") from error
