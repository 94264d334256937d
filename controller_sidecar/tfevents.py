"""TensorBoard event files: TFRecord framing and the scalars in their ``Event`` records.

An event file (``events.out.tfevents.*``) is a sequence of TFRecords: an 8-byte little-endian length, its
masked CRC32C, the data, and the data's masked CRC32C. Each record's data is a serialized ``Event``
protobuf (``tensorflow/core/util/event.proto``). Only the fields a scalar needs are decoded:

* ``Event``: ``wall_time`` (1, double), ``step`` (2, int64), ``summary`` (5).
* ``Summary``: repeated ``value`` (1). ``Summary.Value``: ``tag`` (1), ``simple_value`` (2, float: the
  legacy form TF1 and PyTorch's ``add_scalar`` write), ``tensor`` (8), ``metadata`` (9).
* TF2's ``tf.summary.scalar`` writes a ``tensor`` with one element and ``metadata.plugin_data.plugin_name``
  ``scalars`` (or ``data_class`` DATA_CLASS_SCALAR). ``TensorProto``: ``dtype`` (1), ``tensor_shape`` (2),
  ``tensor_content`` (4), ``half_val`` (13), ``float_val`` (5), ``double_val`` (6), ``int_val`` (7),
  ``int64_val`` (10).

Everything else (graphs, histograms, images, text) is skipped. The checksums come from ``google_crc32c``.
Why a decoder here and not the ``protobuf`` package: docs/dependencies.md.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import google_crc32c

HEADER_BYTES = 12
"""length (8) + its masked CRC (4)."""
MAX_RECORD_BYTES = 256 << 20
"""A length above this is taken for corruption: TensorFlow refuses protobufs over 2 GiB, real events are far smaller."""
_MASK_DELTA = 0xA282EAD8
_SCALARS_PLUGIN = "scalars"
_DATA_CLASS_SCALAR = 1
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_BFLOAT16, _DT_HALF = 1, 2, 3, 9, 14, 19
_CONTENT_FORMATS = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q", _DT_HALF: "<e"}


class CorruptFileError(ValueError):
    """A record's length fails its checksum: the framing is lost and nothing after it can be trusted."""


class CorruptRecordError(ValueError):
    """A record's data fails its checksum or is no valid ``Event``: that record alone is skipped."""


@dataclass(frozen=True)
class Scalar:
    tag: str
    value: float
    step: int
    wall_time: float


def masked_crc32c(data: bytes) -> int:
    crc = int(google_crc32c.value(data))
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def read_record(handle: BinaryIO) -> bytes | None:
    """The next record's data, or None when the file ends before the record does (the writer is not done).

    Raises CorruptFileError (the length's CRC fails) or CorruptRecordError (the data's CRC fails; the handle
    is then past the record, so reading can go on).
    """
    header = handle.read(HEADER_BYTES)
    if len(header) < HEADER_BYTES:
        return None
    (length,) = struct.unpack("<Q", header[:8])
    (length_crc,) = struct.unpack("<I", header[8:])
    if masked_crc32c(header[:8]) != length_crc or length > MAX_RECORD_BYTES:
        raise CorruptFileError(f"record length {length}: checksum mismatch")
    body = handle.read(length + 4)
    if len(body) < length + 4:
        return None
    data, (data_crc,) = body[:length], struct.unpack("<I", body[length:])
    if masked_crc32c(data) != data_crc:
        raise CorruptRecordError(f"record of {length} bytes: data checksum mismatch")
    return data


def event_scalars(data: bytes) -> list[Scalar]:
    """The scalars of one serialized ``Event`` (none for events without a summary)."""
    try:
        return _event_scalars(data)
    except (IndexError, struct.error, UnicodeDecodeError) as error:
        raise CorruptRecordError(f"not an Event record: {error}") from error


def _event_scalars(data: bytes) -> list[Scalar]:
    wall_time, step, summaries = 0.0, 0, []
    for number, wire, value in _fields(data):
        if number == 1 and wire == _FIXED64:
            (wall_time,) = struct.unpack("<d", _as_bytes(value))
        elif number == 2 and wire == _VARINT:
            step = _signed64(_as_int(value))
        elif number == 5 and wire == _LENGTH:
            summaries.append(_as_bytes(value))
    scalars = []
    for summary in summaries:
        for number, wire, value in _fields(summary):
            if number == 1 and wire == _LENGTH:
                found = _value_scalar(_as_bytes(value))
                if found is not None and math.isfinite(found[1]):
                    scalars.append(Scalar(found[0], found[1], step, wall_time))
    return scalars


def _value_scalar(data: bytes) -> tuple[str, float] | None:
    tag, simple, tensor, metadata = "", None, None, None
    for number, wire, value in _fields(data):
        if number == 1 and wire == _LENGTH:
            tag = _as_bytes(value).decode("utf-8")
        elif number == 2 and wire == _FIXED32:
            (simple,) = struct.unpack("<f", _as_bytes(value))
        elif number == 8 and wire == _LENGTH:
            tensor = _as_bytes(value)
        elif number == 9 and wire == _LENGTH:
            metadata = _as_bytes(value)
    if not tag:
        return None
    if simple is not None:
        return tag, float(simple)
    if tensor is not None and metadata is not None and _is_scalar_metadata(metadata):
        scalar = _tensor_scalar(tensor)
        return None if scalar is None else (tag, scalar)
    return None


def _is_scalar_metadata(data: bytes) -> bool:
    for number, wire, value in _fields(data):
        if number == 1 and wire == _LENGTH:  # plugin_data
            for inner, inner_wire, name in _fields(_as_bytes(value)):
                if inner == 1 and inner_wire == _LENGTH and _as_bytes(name) == _SCALARS_PLUGIN.encode():
                    return True
        elif number == 4 and wire == _VARINT and _as_int(value) == _DATA_CLASS_SCALAR:
            return True
    return False


def _tensor_scalar(data: bytes) -> float | None:
    """The one element of a scalar tensor, or None (another shape or type)."""
    dtype, content, elements = 0, b"", 1
    values: list[float] = []
    for number, wire, value in _fields(data):
        if number == 1 and wire == _VARINT:
            dtype = _as_int(value)
        elif number == 2 and wire == _LENGTH:
            elements = _element_count(_as_bytes(value))
        elif number == 4 and wire == _LENGTH:
            content = _as_bytes(value)
        elif number in (5, 6, 7, 10, 13):
            values += _repeated(number, wire, value)
    if elements != 1:
        return None
    if dtype == _DT_HALF and values:  # half_val holds the 16 bits in an int32
        return float(struct.unpack("<e", struct.pack("<H", int(values[0]) & 0xFFFF))[0])
    if dtype == _DT_BFLOAT16 and len(content) == 2:
        return float(struct.unpack("<f", b"\0\0" + content)[0])
    if content:
        fmt = _CONTENT_FORMATS.get(dtype)
        if fmt is None or len(content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, content)[0])
    return values[0] if len(values) == 1 else None


def _element_count(shape: bytes) -> int:
    count = 1
    for number, wire, value in _fields(shape):
        if number == 2 and wire == _LENGTH:  # dim
            for inner, inner_wire, size in _fields(_as_bytes(value)):
                if inner == 1 and inner_wire == _VARINT:
                    count *= _signed64(_as_int(size))
        elif number == 3 and wire == _VARINT and _as_int(value):  # unknown_rank
            return -1
    return count


def _repeated(number: int, wire: int, value: int | bytes) -> list[float]:
    """A packed or unpacked repeated numeric field of ``TensorProto``."""
    if number == 5:
        fmt, size = "<f", 4
    elif number == 6:
        fmt, size = "<d", 8
    else:
        if wire == _VARINT:
            return [float(_signed64(_as_int(value)))]
        packed = _as_bytes(value)
        return [float(_signed64(item)) for item in _varints(packed)]
    if wire == _LENGTH:
        packed = _as_bytes(value)
        return [float(item[0]) for item in struct.iter_unpack(fmt, packed[: len(packed) - len(packed) % size])]
    return [float(struct.unpack(fmt, _as_bytes(value))[0])]


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of each field of a message: an int for varints, bytes otherwise."""
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            varint, position = _varint(data, position)
            yield number, wire, varint
        elif wire == _FIXED64:
            yield number, wire, _slice(data, position, 8)
            position += 8
        elif wire == _FIXED32:
            yield number, wire, _slice(data, position, 4)
            position += 4
        elif wire == _LENGTH:
            length, position = _varint(data, position)
            yield number, wire, _slice(data, position, length)
            position += length
        else:
            raise CorruptRecordError(f"unsupported protobuf wire type {wire} (field {number})")


def _slice(data: bytes, start: int, length: int) -> bytes:
    if start + length > len(data):
        raise CorruptRecordError("a protobuf field runs past the end of its message")
    return data[start : start + length]


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise CorruptRecordError("a protobuf varint is longer than 10 bytes")


def _varints(data: bytes) -> Iterator[int]:
    position = 0
    while position < len(data):
        value, position = _varint(data, position)
        yield value


def _signed64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _as_int(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise CorruptRecordError("expected a varint")
    return value


def _as_bytes(value: int | bytes) -> bytes:
    if isinstance(value, int):
        raise CorruptRecordError("expected a length-delimited field")
    return value
