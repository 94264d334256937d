"""The opaque ``next`` token of keyset paging (the jobs list's, the console's sweeps and trials): the last row's key
and a tag naming what it pages (a query's digest, a list's name), as URL-safe base64 of JSON. A page is the rows
after that key, never an offset; the tag lets a token handed to another list be refused rather than misread."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any


def encode(key: Sequence[Any], tag: str) -> str:
    raw = json.dumps({"k": list(key), "q": tag}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: str) -> tuple[Any, object]:
    """The token's key and tag, as the token holds them (the caller checks their shapes); `ValueError` for a text
    that is not a token."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        key, tag = raw["k"], raw["q"]
    except (binascii.Error, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{token[:40]!r} is not a next token") from e
    return key, tag
