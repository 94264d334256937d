"""A job submitted with its model code: one ``multipart/form-data`` request, read as it arrives.

Parts: ``manifest`` (the YAML text), and optionally ``source`` (its file name), ``image`` (``--image``),
``search`` and ``search_source`` (a sweep's search file and its name: ``POST /v1/sweeps``) and, last, ``model``
(the model code as a zip). The text parts are read first; the model part is handed on as a
stream of its bytes as they come off the request (never whole in memory), which stops with 413 the moment it
passes the limit, whatever length the request declared. A body that sends nothing for ``idle_s``, or is not
done after ``total_s``, ends the submit (`UploadTimeoutError`, 408): the model's stream raises, so the multipart
upload behind it is aborted.

A browser's folder (``<input type=file webkitdirectory>``, the console's submit page) comes as one part per file,
each named by its path in the folder: with ``folder`` (the name of those parts), the reader takes any number of
them after the text parts and before ``model``, and hands every file part on as a `FilePart` marker followed by
its bytes (``Submission.files``; the console zips them). Their bytes together are held to what the request may
declare (the limits plus ``MULTIPART_OVERHEAD``): the zip made of them is held to the model's limit.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from learnerkit.scheduler.errors import (
    ClientGoneError,
    InvalidRequestError,
    ManifestTooLargeError,
    UploadTimeoutError,
    model_too_large,
)

TEXT_FIELDS = ("manifest", "source", "image", "search", "search_source")
MAX_SHORT_FIELD = 1024
"""``source``, ``image`` and ``search_source`` are names, not documents."""
MULTIPART_OVERHEAD = 64 * 1024
"""Boundaries and part headers: a declared length above the limits plus this is refused unread."""


@dataclass(frozen=True)
class BodyTimeouts:
    idle_s: float = 60.0
    """The longest wait for the body's next bytes."""
    total_s: float = 3600.0
    """The longest the whole body may take."""


@dataclass(frozen=True)
class FilePart:
    """A file part begins: its part name and the file name the client sent."""

    name: str
    filename: str


@dataclass(frozen=True)
class Submission:
    manifest: str
    source: str
    image: str | None
    model: AsyncIterator[bytes] | None
    """The model part's bytes as they arrive (read it to its end), or None."""
    search: str | None = None
    """A sweep's search file."""
    search_source: str = "search.yml"
    texts: Mapping[str, str] = field(default_factory=dict)
    """Every text part by name, ``extra`` ones included."""
    filenames: Mapping[str, str] = field(default_factory=dict)
    """The file name a part was sent with (a browser's file input), by part name."""
    files: AsyncIterator[bytes | FilePart] | None = None
    """With ``folder``: every file part (the folder's, then ``model``), each a `FilePart` then its bytes; ``model``
    is then None."""


def declared_too_large(content_length: str, max_manifest_bytes: int, max_model_bytes: int) -> bool:
    return content_length.isdigit() and int(content_length) > max_manifest_bytes + max_model_bytes + MULTIPART_OVERHEAD


class _Receiver:
    """Callbacks of the streaming parser: text parts into memory (capped), the model's bytes into a queue."""

    def __init__(
        self, max_manifest_bytes: int, max_model_bytes: int, extra: Mapping[str, int], folder: str | None = None
    ) -> None:
        self.max_manifest_bytes = max_manifest_bytes
        self.max_model_bytes = max_model_bytes
        self.extra = extra
        self.folder = folder
        self.texts: dict[str, bytearray] = {}
        self.filenames: dict[str, str] = {}
        self.model: deque[bytes | FilePart] = deque()
        self.model_started = False
        """A file part has begun (the model, or the folder's first file): the text parts are all read."""
        self.model_done = False
        self.last_started = False
        """The model part has begun: no part may follow it."""
        self.part_open = False
        self._model_bytes = 0
        self._folder_bytes = 0
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._disposition = b""
        self._field = ""

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda data, start, end: self._header_name.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._header_value.extend(data[start:end]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
        }

    def _part_begin(self) -> None:
        self._disposition = b""
        if self.last_started:
            raise InvalidRequestError("the model part must be the last part")

    def _header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, params = parse_options_header(self._disposition)
        name = params.get(b"name", b"").decode("utf-8", "replace")
        filename = params.get(b"filename", b"").decode("utf-8", "replace")
        if name == "model" or (name == self.folder and name):
            self.model_started = self.part_open = True
            self.last_started = name == "model"
            if self.folder:
                self.model.append(FilePart(name, filename))
        elif self.model_started:
            raise InvalidRequestError(f"the {name!r} part comes after the model's: text parts go first")
        elif name in TEXT_FIELDS or name in self.extra:
            if name in self.texts:
                raise InvalidRequestError(f"the request has two {name!r} parts")
            self.texts[name] = bytearray()
        else:
            expected = ", ".join((*TEXT_FIELDS, *self.extra))
            raise InvalidRequestError(f"unknown part {name!r}: expected {expected} or model")
        if b"filename" in params:
            self.filenames[name] = params[b"filename"].decode("utf-8", "replace")
        self._field = name

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._field == "model" or (self._field == self.folder and self.folder):
            if self._field == "model":
                self._model_bytes += end - start
                if self._model_bytes > self.max_model_bytes:
                    raise model_too_large(self.max_model_bytes)
            else:
                self._folder_bytes += end - start
                if self._folder_bytes > self.max_manifest_bytes + self.max_model_bytes + MULTIPART_OVERHEAD:
                    raise model_too_large(self.max_model_bytes)
            self.model.append(data if start == 0 and end == len(data) else data[start:end])  # most chunks: no copy
            return
        text = self.texts[self._field]
        text.extend(data[start:end])
        documents = ("manifest", "search")
        cap = self.max_manifest_bytes if self._field in documents else self.extra.get(self._field, MAX_SHORT_FIELD)
        if len(text) > cap:
            if self._field in documents:
                raise ManifestTooLargeError(f"the {self._field} is over {cap} bytes, the most this scheduler reads")
            raise InvalidRequestError(f"the {self._field!r} part is over {cap} bytes")

    def _part_end(self) -> None:
        self.part_open = False
        if self._field == "model":
            self.model_done = True

    def text_fields(self) -> dict[str, str]:
        if "manifest" not in self.texts:
            raise InvalidRequestError("the request has no 'manifest' part before the model")
        try:
            texts = {name: bytes(value).decode("utf-8") for name, value in self.texts.items()}
        except UnicodeDecodeError as e:
            raise InvalidRequestError(f"a text part is not UTF-8: {e}") from e
        return texts


class _Body:
    """The request body fed to the parser one chunk at a time, parse errors as the API's 400."""

    def __init__(self, parser: MultipartParser, body: AsyncIterator[bytes], timeouts: BodyTimeouts) -> None:
        self.parser = parser
        self.body = body
        self.ended = False
        self.timeouts = timeouts
        self.deadline = asyncio.get_running_loop().time() + timeouts.total_s

    async def _next(self) -> bytes | None:
        left = self.deadline - asyncio.get_running_loop().time()
        idle = self.timeouts.idle_s
        try:
            async with asyncio.timeout(min(idle, left)):
                return await anext(self.body, None)
        except ClientDisconnect:
            self.ended = True
            raise ClientGoneError("the client disconnected during the upload") from None
        except TimeoutError:
            self.ended = True
            if left <= idle:
                raise UploadTimeoutError(f"the request body took over {self.timeouts.total_s:g} s") from None
            raise UploadTimeoutError(f"the request body sent nothing for {idle:g} s") from None

    async def feed(self) -> None:
        chunk = await self._next()
        try:
            if chunk is None:
                self.ended = True
                self.parser.finalize()
            else:
                self.parser.write(chunk)
        except MultipartParseError as e:
            raise InvalidRequestError(f"not a valid multipart/form-data body: {e}") from e


async def _model_bytes(receiver: _Receiver, body: _Body) -> AsyncIterator[bytes | FilePart]:
    while True:
        while receiver.model:
            yield receiver.model.popleft()
        if receiver.model_done:
            while not body.ended:  # the closing boundary: read, so the connection can carry the answer
                await body.feed()
            return
        if body.ended:
            if receiver.folder and not receiver.part_open:
                return  # a folder's files without a model part after them
            raise InvalidRequestError("the model part is cut short")
        await body.feed()


async def _only_bytes(parts: AsyncIterator[bytes | FilePart]) -> AsyncIterator[bytes]:
    """The model's bytes (without ``folder`` no marker is queued)."""
    async for part in parts:
        if isinstance(part, bytes):
            yield part


async def receive_submission(
    content_type: str,
    body: AsyncIterator[bytes],
    *,
    max_manifest_bytes: int,
    max_model_bytes: int,
    timeouts: BodyTimeouts | None = None,
    extra: Mapping[str, int] | None = None,
    folder: str | None = None,
) -> Submission:
    """The text parts of a multipart submission, read now, and its model part as a stream to read on; ``extra``:
    more text parts to take (the console's form), each with its most bytes; ``folder``: the name of a folder's
    file parts to take too (``Submission.files``)."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidRequestError("multipart/form-data without a boundary")
    receiver = _Receiver(max_manifest_bytes, max_model_bytes, extra or {}, folder)
    reader = _Body(MultipartParser(boundary, receiver.callbacks()), body, timeouts or BodyTimeouts())  # type: ignore[arg-type]
    while not receiver.model_started and not reader.ended:
        await reader.feed()
    texts = receiver.text_fields()
    parts = _model_bytes(receiver, reader) if receiver.model_started else None
    return Submission(
        texts["manifest"],
        texts.get("source") or "manifest.yml",
        texts.get("image"),
        _only_bytes(parts) if parts is not None and not folder else None,
        texts.get("search"),
        texts.get("search_source") or "search.yml",
        texts,
        receiver.filenames,
        parts if folder else None,
    )
