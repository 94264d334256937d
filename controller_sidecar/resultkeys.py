"""The object key of each result file: every name the learner can give a file is stored under a key of its
own, or refused by name.

A result's key is the results prefix plus its relative path with these bytes percent-encoded (``%XX``,
upper-case hex): ``%`` itself, ``\\``, control characters (``0x00``-``0x1F``, ``0x7F``; a newline among them)
and every byte of a sequence that is not valid UTF-8. Nothing else changes, so ``model.onnx`` and
``a/b.txt`` keep their names. The encoding is reversible (:func:`original_name`, which is
``urllib.parse.unquote_to_bytes``), and ``x\\y.txt`` (``x%5Cy.txt``) never collides with ``x/y.txt``. S3 keys
are at most :data:`MAX_KEY_BYTES` bytes of UTF-8: a longer key is refused (:class:`ResultRefused`).
"""

from __future__ import annotations

import os
from urllib.parse import unquote_to_bytes

MAX_KEY_BYTES = 1024
"""S3's limit on the UTF-8 length of an object key."""
SHOWN_NAME_CHARS = 60
"""A name in a status message is cut to this many characters (its full form is in the sidecar's log)."""
_ESCAPED = frozenset("%\\\x7f") | frozenset(chr(code) for code in range(0x20))
_ESCAPE_FIRST, _ESCAPE_LAST = 0xDC80, 0xDCFF
"""surrogateescape's range: the bytes of a name that are not valid UTF-8."""


class ResultRefused(Exception):
    """A result that cannot be stored: ``name`` is its relative path, ``reason`` says why, briefly."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{shown_name(name)}: {reason}")
        self.name = name
        self.reason = reason


def encoded_name(relative: str) -> str:
    """``relative`` (a file system name, non-UTF-8 bytes as surrogate escapes) as it appears in a key."""
    text = os.fsencode(relative).decode("utf-8", "surrogateescape")
    out: list[str] = []
    for char in text:
        code = ord(char)
        if _ESCAPE_FIRST <= code <= _ESCAPE_LAST:
            out.append(f"%{code - 0xDC00:02X}")
        elif char in _ESCAPED:
            out.append(f"%{code:02X}")
        else:
            out.append(char)
    return "".join(out)


def original_name(encoded: str) -> bytes:
    """The bytes of the name :func:`encoded_name` encoded."""
    return unquote_to_bytes(encoded)


def result_key(prefix: str, relative: str) -> str:
    """The key of the result ``relative`` under ``prefix``; ResultRefused when S3 cannot hold it."""
    key = prefix + encoded_name(relative)
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise ResultRefused(relative, f"its key is {size:,} bytes; S3 allows {MAX_KEY_BYTES:,}")
    return key


def shown_name(name: str) -> str:
    """``name`` for a message: encoded (printable), quoted, and cut to :data:`SHOWN_NAME_CHARS` characters."""
    encoded = encoded_name(name)
    if len(encoded) <= SHOWN_NAME_CHARS:
        return repr(encoded)
    return f"{encoded[:SHOWN_NAME_CHARS]!r}... ({len(encoded):,} characters)"
