"""Reading what the learner leaves on the shared volume without following its links.

The learner can put anything under ``/job``: a symbolic link to ``/proc/self/environ`` in place of its log
would make a sidecar that opens files by path ship its own environment (the S3 and etcd secrets). So every
file the sidecar reads there is opened one component at a time from ``/``, each with ``O_NOFOLLOW`` (a link
anywhere on the way is refused, not only the last one), ``O_NONBLOCK`` (a FIFO cannot hang the open), and
is then checked on the open descriptor to be a regular file. The sidecar's own paths hold no links: its
``job_dir`` is resolved when the settings are read.

Refusals are :class:`UnsafeFileError` naming the path. Walking a folder (results, checkpoints, event files)
skips links and special files with a warning instead, once per path (:func:`warn_once`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from controller_sidecar.errors import PermanentError, UnsafeFileError

LOGGER = logging.getLogger(__name__)
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_T = TypeVar("_T")
MAX_WARNED_PATHS = 10_000
"""Paths remembered as warned about; past this many, further refusals are not logged (one line says so)."""
_warned: set[str] = set()


def warn_once(path: Path, message: str, logger: logging.Logger = LOGGER) -> None:
    """Log ``message`` about the refused ``path`` the first time only: the followers walk the same folders on
    every poll, and a planted link stays where it is."""
    key = os.fsdecode(path)
    if key in _warned or len(_warned) > MAX_WARNED_PATHS:
        return
    _warned.add(key)
    if len(_warned) > MAX_WARNED_PATHS:
        logger.warning("more than %d paths refused; no further ones are logged", MAX_WARNED_PATHS)
        return
    logger.warning("%s", message)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a special file (FIFO, socket or device)"


def _open_at(dir_fd: int | None, name: str, path: Path, *, folder: bool) -> int:
    """``name`` in ``dir_fd``, never through a link; ``path`` (its full path) names it in errors."""
    try:
        return os.open(name, _OPEN_FLAGS | (os.O_DIRECTORY if folder else 0), dir_fd=dir_fd)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        try:
            found = _kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            raise error from None
        raise UnsafeFileError(_refusal(path, found, "a folder" if folder else "a regular file")) from None


def _refusal(path: Path, found: str, wanted: str) -> str:
    why = "the sidecar never follows links under /job" if found == "a symbolic link" else "the sidecar does not read it"
    return f"{path}: is {found}, not {wanted}; {why}"


def _open_folder_at(dir_fd: int, name: str, path: Path) -> int:
    return _open_at(dir_fd, name, path, folder=True)


def _open_parent(path: Path) -> tuple[int, str]:
    """An open descriptor of ``path``'s folder, reached from ``/`` without links, and the last component."""
    absolute = path.absolute()
    *folders, name = absolute.parts[1:]
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    current = Path("/")
    try:
        for part in folders:
            current /= part
            child = _open_at(fd, part, current, folder=True)
            os.close(fd)
            fd = child
    except (OSError, UnsafeFileError):
        os.close(fd)
        raise
    return fd, name


def open_folder(path: Path) -> int:
    """A descriptor of the folder ``path``; FileNotFoundError when it is missing, UnsafeFileError for a link."""
    parent, name = _open_parent(path)
    try:
        return _open_at(parent, name, path, folder=True)
    finally:
        os.close(parent)


def open_regular(path: Path) -> BinaryIO:
    """``path`` open for reading: a regular file reached without links (FileNotFoundError when missing)."""
    parent, name = _open_parent(path)
    try:
        fd = _open_at(parent, name, path, folder=False)
    finally:
        os.close(parent)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafeFileError(_refusal(path, _kind(mode), "a regular file"))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def create_shared_file(path: Path, mode: int = 0o664) -> None:
    """An empty regular file at ``path`` that group 0 (the learner's) may append to, unless something is there
    already; its folder is made (group-writable) when missing. Never through a link."""
    with contextlib.suppress(FileExistsError):  # something else than a folder: the open below refuses it
        path.parent.mkdir(mode=0o775, exist_ok=True)
    parent, name = _open_parent(path)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    except FileExistsError:
        return
    finally:
        os.close(parent)
    try:
        os.fchmod(fd, mode)  # whatever the umask
    finally:
        os.close(fd)


def read_regular(path: Path) -> bytes:
    """The whole content of :func:`open_regular`'s file."""
    with open_regular(path) as handle:
        return handle.read()


def regular_files(folder: Path, *, skip_folder: Callable[[str], bool] = lambda name: False) -> list[str]:
    """The regular files below ``folder`` as sorted relative POSIX names; empty when it does not exist.

    Links and special files below ``folder`` are skipped with a warning; ``folder`` itself being one raises
    UnsafeFileError. Folders whose name ``skip_folder`` accepts are not entered. Open each file with
    :func:`open_learner_file`: this listing is a snapshot, the open is what checks.
    """
    try:
        top = _unreadable_is_permanent(folder, open_folder)
    except FileNotFoundError:
        return []
    found: list[str] = []
    _collect(top, folder, "", found, skip_folder)
    return sorted(found)


def open_learner_file(path: Path, *, gone_ok: bool = True) -> BinaryIO | None:
    """:func:`open_regular` for an upload: None, with a warning, for a link, a special file or (``gone_ok``)
    a file gone since it was listed; PermanentError for a file the sidecar may not read."""
    try:
        return _unreadable_is_permanent(path, open_regular)
    except FileNotFoundError:
        if not gone_ok:
            raise
        LOGGER.warning("skipped: %s is gone", path)
    except UnsafeFileError as error:
        warn_once(path, f"skipped: {error}")
    return None


def _unreadable_is_permanent(path: Path, opener: Callable[[Path], _T]) -> _T:
    try:
        return opener(path)
    except PermissionError as error:
        raise PermanentError(
            f"{path}: the sidecar may not read it ({error.strerror}); the learner must leave its outputs "
            "readable by group 0"
        ) from error


def _collect(fd: int, folder: Path, prefix: str, found: list[str], skip_folder: Callable[[str], bool]) -> None:
    """Add the regular files of the open folder ``fd`` (``folder/prefix``) to ``found``; closes ``fd``."""
    try:
        with os.scandir(fd) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            relative = f"{prefix}{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                if skip_folder(entry.name):
                    continue
                try:
                    child = _unreadable_is_permanent(
                        folder / relative, functools.partial(_open_folder_at, fd, entry.name)
                    )
                except (UnsafeFileError, FileNotFoundError) as error:
                    warn_once(folder / relative, f"skipped: {error}")
                    continue
                _collect(child, folder, f"{relative}/", found, skip_folder)
            elif entry.is_file(follow_symlinks=False):
                found.append(relative)
            else:
                kind = "a symbolic link" if entry.is_symlink() else "a special file (FIFO, socket or device)"
                warn_once(
                    folder / relative, f"skipped: {_refusal(folder / relative, kind, 'a regular file or folder')}"
                )
    finally:
        os.close(fd)
