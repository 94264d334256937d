"""What the sidecar knows of stored objects without the S3 client: importing it costs no boto3.

The transfer modules and the runtime name :class:`~controller_sidecar.s3store.S3Store` only for type
checking, so the sidecar imports boto3 and makes its client (about a quarter CPU-second and 25 MB) only
when it first talks to S3: after its first status is on its way to etcd.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

PARTIAL_SUFFIX = ".lk-partial"
"""Downloads stream into ``.<random>.lk-partial`` beside their destination, then are renamed."""


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    etag: str
    """Without quotes: ``<md5>`` or ``<md5>-<parts>``."""


@dataclass(frozen=True)
class OpenUpload:
    """A multipart upload begun and neither completed nor aborted: its parts take space until it is aborted."""

    key: str
    upload_id: str
    initiated: datetime


@dataclass(frozen=True)
class HashedObject(RemoteObject):
    """An object with the SHA-256 of the bytes the sidecar sent or received, taken as they streamed."""

    sha256: str = ""
