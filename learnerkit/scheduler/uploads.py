"""A job submitted with its model code: one ``multipart/form-data`` request, read as it arrives.

Parts: ``manifest`` (the YAML text), and optionally ``source`` (its file name), ``image`` (``--image``) and
``model`` (the model code as a zip). The model goes to a temporary file as its bytes arrive, never whole into
memory, and the request is refused (413) the moment it passes the limit; the caller uploads the file to the
object store and removes it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from learnerkit.scheduler.errors import InvalidRequestError, ManifestTooLargeError, ModelTooLargeError

TEXT_FIELDS = ("manifest", "source", "image")
MAX_SHORT_FIELD = 1024
"""``source`` and ``image`` are names, not documents."""
MULTIPART_OVERHEAD = 64 * 1024
"""Boundaries and part headers: a declared length above the limits plus this is refused unread."""


@dataclass(frozen=True)
class Submission:
    manifest: str
    source: str
    image: str | None
    model: Path | None
    """The received model archive (a temporary file the caller removes), or None."""


def declared_too_large(content_length: str, max_manifest_bytes: int, max_model_bytes: int) -> bool:
    return content_length.isdigit() and int(content_length) > max_manifest_bytes + max_model_bytes + MULTIPART_OVERHEAD


def model_too_large(max_model_bytes: int) -> ModelTooLargeError:
    return ModelTooLargeError(
        f"the model is over {max_model_bytes} bytes, the most this scheduler takes (LEARNERKIT_MAX_MODEL_BYTES)"
    )


class _Receiver:
    """Callbacks of the streaming parser: text parts into memory (capped), the model into a file."""

    def __init__(self, max_manifest_bytes: int, max_model_bytes: int, workdir: Path | None) -> None:
        self.max_manifest_bytes = max_manifest_bytes
        self.max_model_bytes = max_model_bytes
        self.workdir = workdir
        self.texts: dict[str, bytearray] = {}
        self.model_path: Path | None = None
        self._model: IO[bytes] | None = None
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

    def _header_end(self) -> None:
        if bytes(self._header_name).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, params = parse_options_header(self._disposition)
        name = params.get(b"name", b"").decode("utf-8", "replace")
        if name == "model":
            if self.model_path is not None:
                raise InvalidRequestError("the request has two model parts")
            handle, path = tempfile.mkstemp(prefix="learnerkit-model-", suffix=".zip", dir=self.workdir)
            self.model_path = Path(path)
            self._model = os.fdopen(handle, "wb")
        elif name in TEXT_FIELDS:
            if name in self.texts:
                raise InvalidRequestError(f"the request has two {name!r} parts")
            self.texts[name] = bytearray()
        else:
            raise InvalidRequestError(f"unknown part {name!r}: expected manifest, source, image or model")
        self._field = name

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._field == "model" and self._model is not None:
            self._model_bytes += end - start
            if self._model_bytes > self.max_model_bytes:
                raise model_too_large(self.max_model_bytes)
            self._model.write(data[start:end])
            return
        text = self.texts[self._field]
        text.extend(data[start:end])
        cap = self.max_manifest_bytes if self._field == "manifest" else MAX_SHORT_FIELD
        if len(text) > cap:
            if self._field == "manifest":
                raise ManifestTooLargeError(f"the manifest is over {cap} bytes, the most this scheduler reads")
            raise InvalidRequestError(f"the {self._field!r} part is over {cap} bytes")

    def _part_end(self) -> None:
        if self._field == "model" and self._model is not None:
            self._model.close()
            self._model = None

    def discard(self) -> None:
        if self._model is not None:
            self._model.close()
        if self.model_path is not None:
            self.model_path.unlink(missing_ok=True)

    def submission(self) -> Submission:
        if "manifest" not in self.texts:
            raise InvalidRequestError("the request has no 'manifest' part")
        try:
            texts = {name: bytes(value).decode("utf-8") for name, value in self.texts.items()}
        except UnicodeDecodeError as e:
            raise InvalidRequestError(f"a text part is not UTF-8: {e}") from e
        if self._model is not None:
            raise InvalidRequestError("the model part is cut short")
        return Submission(texts["manifest"], texts.get("source") or "manifest.yml", texts.get("image"), self.model_path)


async def receive_submission(
    content_type: str,
    body: AsyncIterator[bytes],
    *,
    max_manifest_bytes: int,
    max_model_bytes: int,
    workdir: Path | None = None,
) -> Submission:
    """Read a multipart submission from ``body``; nothing of it is left behind when it is refused."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidRequestError("multipart/form-data without a boundary")
    receiver = _Receiver(max_manifest_bytes, max_model_bytes, workdir)
    parser = MultipartParser(boundary, receiver.callbacks())  # type: ignore[arg-type]
    try:
        async for chunk in body:
            parser.write(chunk)
        parser.finalize()
        return receiver.submission()
    except MultipartParseError as e:
        receiver.discard()
        raise InvalidRequestError(f"not a valid multipart/form-data body: {e}") from e
    except BaseException:
        receiver.discard()
        raise


def remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
