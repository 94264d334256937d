"""A job submitted with its model code: one ``multipart/form-data`` request, read as it arrives.

Parts: ``manifest`` (the YAML text), and optionally ``source`` (its file name), ``image`` (``--image``),
``search`` and ``search_source`` (a sweep's search file and its name: ``POST /v1/sweeps``) and, last, ``model``
(the model code as a zip). The text parts are read first; the model part is handed on as a
stream of its bytes as they come off the request (never whole in memory), which stops with 413 the moment it
passes the limit, whatever length the request declared. A body that sends nothing for ``idle_s``, or is not
done after ``total_s``, ends the submit (`UploadTimeoutError`, 408): the model's stream raises, so the multipart
upload behind it is aborted.
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
    ModelTooLargeError,
    UploadTimeoutError,
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


def declared_too_large(content_length: str, max_manifest_bytes: int, max_model_bytes: int) -> bool:
    return content_length.isdigit() and int(content_length) > max_manifest_bytes + max_model_bytes + MULTIPART_OVERHEAD


def model_too_large(max_model_bytes: int) -> ModelTooLargeError:
    return ModelTooLargeError(
        f"the model is over {max_model_bytes} bytes, the most this scheduler takes (LEARNERKIT_MAX_MODEL_BYTES)"
    )


class _Receiver:
    """Callbacks of the streaming parser: text parts into memory (capped), the model's bytes into a queue."""

    def __init__(self, max_manifest_bytes: int, max_model_bytes: int, extra: Mapping[str, int]) -> None:
        self.max_manifest_bytes = max_manifest_bytes
        self.max_model_bytes = max_model_bytes
        self.extra = extra
        self.texts: dict[str, bytearray] = {}
        self.filenames: dict[str, str] = {}
        self.model: deque[bytes] = deque()
        self.model_started = False
        self.model_done = False
        self._model_bytes = 0
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
        if self.model_started:
            raise InvalidRequestError("the model part must be the last part")

    def _header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, params = parse_options_header(self._disposition)
        name = params.get(b"name", b"").decode("utf-8", "replace")
        if name == "model":
            self.model_started = True
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
        if self._field == "model":
            self._model_bytes += end - start
            if self._model_bytes > self.max_model_bytes:
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


async def _model_bytes(receiver: _Receiver, body: _Body) -> AsyncIterator[bytes]:
    while True:
        while receiver.model:
            yield receiver.model.popleft()
        if receiver.model_done:
            while not body.ended:  # the closing boundary: read, so the connection can carry the answer
                await body.feed()
            return
        if body.ended:
            raise InvalidRequestError("the model part is cut short")
        await body.feed()


async def receive_submission(
    content_type: str,
    body: AsyncIterator[bytes],
    *,
    max_manifest_bytes: int,
    max_model_bytes: int,
    timeouts: BodyTimeouts | None = None,
    extra: Mapping[str, int] | None = None,
) -> Submission:
    """The text parts of a multipart submission, read now, and its model part as a stream to read on; ``extra``:
    more text parts to take (the console's form), each with its most bytes."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidRequestError("multipart/form-data without a boundary")
    receiver = _Receiver(max_manifest_bytes, max_model_bytes, extra or {})
    reader = _Body(MultipartParser(boundary, receiver.callbacks()), body, timeouts or BodyTimeouts())  # type: ignore[arg-type]
    while not receiver.model_started and not reader.ended:
        await reader.feed()
    texts = receiver.text_fields()
    model = _model_bytes(receiver, reader) if receiver.model_started else None
    return Submission(
        texts["manifest"],
        texts.get("source") or "manifest.yml",
        texts.get("image"),
        model,
        texts.get("search"),
        texts.get("search_source") or "search.yml",
        texts,
        receiver.filenames,
    )
