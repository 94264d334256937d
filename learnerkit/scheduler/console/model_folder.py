"""The model code as the submit page sends it: a zip (one ``model`` part) or a folder (``<input type=file
webkitdirectory>``: one ``model_folder`` part per file, named by its path under the folder chosen), zipped here
as `learnerkit job submit MANIFEST FOLDER` zips it (`zip_folder`: the folder's files by their paths under it), so
the facade's `submit` checks and stores it exactly as it does the CLI's. The zip is written to a temporary file
and held to the model's limit as it grows (`model_too_large`, the API's words); a file whose path could not be
extracted safely is refused naming it, as the sidecar's extraction would refuse it."""

from __future__ import annotations

import asyncio
import tempfile
import zipfile
from collections.abc import AsyncGenerator, AsyncIterator
from typing import IO, Protocol

from controller_sidecar.errors import UnsafePathError
from controller_sidecar.safepaths import relative_parts
from learnerkit.scheduler.errors import ModelCodeError, model_too_large

ZIP_PART = "model"
FOLDER_PART = "model_folder"
READ_CHUNK = 1 << 20


class FilePart(Protocol):
    """A file part begins (`learnerkit.scheduler.api.multipart.FilePart`): its part name and file name."""

    @property
    def name(self) -> str: ...
    @property
    def filename(self) -> str: ...


async def chosen_model(
    parts: AsyncIterator[bytes | FilePart], max_model_bytes: int
) -> AsyncGenerator[bytes, None] | None:
    """The model's bytes from the form's file parts: the folder's files zipped, or the zip as sent; None when
    neither input was given a file. `ModelCodeError` for both at once, or a path the folder may not hold."""
    archive: _FolderZip | None = None
    part: FilePart | None = None
    async for item in parts:
        if not isinstance(item, bytes):
            part = item
            if part.name == ZIP_PART:
                break
            if part.filename:
                archive = archive or _FolderZip(max_model_bytes)
                archive.add(part.filename)
        elif archive is not None and part is not None and part.filename:
            archive.write(item)
    if part is None or part.name != ZIP_PART:
        return archive.stream() if archive is not None else None
    first = await _first_bytes(parts)
    if archive is None:
        return _chain(first, parts) if first else None
    if first:
        archive.close()
        raise ModelCodeError("the model code: choose a zip or a folder, not both")
    return archive.stream()


async def _first_bytes(parts: AsyncIterator[bytes | FilePart]) -> bytes:
    async for item in parts:
        if isinstance(item, bytes) and item:
            return item
    return b""


async def _chain(first: bytes, rest: AsyncIterator[bytes | FilePart]) -> AsyncGenerator[bytes, None]:
    yield first
    async for item in rest:
        if isinstance(item, bytes):
            yield item


class _FolderZip:
    """A folder's files written into a zip as they arrive."""

    def __init__(self, max_model_bytes: int) -> None:
        self.max_model_bytes = max_model_bytes
        self.file: IO[bytes] = tempfile.TemporaryFile(prefix="learnerkit-model-")  # noqa: SIM115  # closed by stream
        self.zip = zipfile.ZipFile(self.file, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True)
        self.names: set[str] = set()
        self.member: IO[bytes] | None = None

    def add(self, filename: str) -> None:
        """A file begins: its path under the folder chosen (the browser sends the folder's own name first)."""
        self._end_member()
        try:
            parts = relative_parts(filename, what="the model folder")
        except UnsafePathError as e:
            self.close()
            raise ModelCodeError(str(e)) from None
        name = "/".join(parts[1:]) if len(parts) > 1 else parts[0]
        if name in self.names:
            self.close()
            raise ModelCodeError(f"the model folder: {filename!r} was sent twice")
        self.names.add(name)
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        self.member = self.zip.open(info, "w", force_zip64=True)

    def write(self, data: bytes) -> None:
        if self.member is None:
            return
        self.member.write(data)
        if self.file.tell() > self.max_model_bytes:
            self.close()
            raise model_too_large(self.max_model_bytes)

    def _end_member(self) -> None:
        if self.member is not None:
            self.member.close()
            self.member = None

    def close(self) -> None:
        """Give up the zip (a refusal): its temporary file is gone."""
        try:
            self._end_member()
            self.zip.close()
        finally:
            self.file.close()

    async def stream(self) -> AsyncGenerator[bytes, None]:
        """The zip's bytes, once every file is in; the temporary file is gone after."""
        try:
            self._end_member()
            self.zip.close()
            if self.file.tell() > self.max_model_bytes:
                raise model_too_large(self.max_model_bytes)
            self.file.seek(0)
            while chunk := await asyncio.to_thread(self.file.read, READ_CHUNK):
                yield chunk
        finally:
            self.file.close()
