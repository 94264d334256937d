"""The object store, behind one small synchronous, thread-safe class: the only module that imports boto3.

Every botocore failure is translated here (:func:`translate_error`): what a retry can fix becomes a
:class:`TransientError` (with the server's ``Retry-After``), anything else a :class:`PermanentError` or
:class:`TransferError` naming ``s3://bucket/key``. botocore's own retries are off; callers retry with
:mod:`controller_sidecar.retry`.

Integrity, as measured on SeaweedFS 4.x (which behaves like AWS here): a single-part object's ETag is the
MD5 of its bytes; a multipart object's ETag is ``md5(md5(part1) + ... + md5(partN))-N``, and
``HEAD ?partNumber=1`` tells the part size. A download's GET carries ``If-Match``, so a replaced object is
refused, not mixed. Where the store keeps a whole-object checksum (botocore sends a CRC32 with every
single-part upload), botocore checks the body against it; otherwise (a multipart object's composite checksum,
an object stored without one) the download hashes the bytes as they stream and compares with the ETag the
listing gave. Uploads send a CRC32 with every request (set in the client's config; the server checks it),
and a whole file's stored ETag is then compared with the one computed from the file, which catches anything
lost between the file and the store.
"""

from __future__ import annotations

import base64
import bisect
import email.utils
import hashlib
import io
import itertools
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    ResponseStreamingError,
)
from s3transfer.manager import TransferManager
from s3transfer.utils import ChunksizeAdjuster

from controller_sidecar.atomicfile import fsync_dir
from controller_sidecar.errors import PermanentError, SidecarError, TransferError, TransientError
from controller_sidecar.s3objects import PARTIAL_SUFFIX, HashedObject, OpenUpload, RemoteObject
from controller_sidecar.settings import S3Location, S3Settings

LOGGER = logging.getLogger(__name__)
MIB = 1024 * 1024
_CHUNK = 1 * MIB
_PART_SIZE = 8 * MIB
_DIGEST_CODES = frozenset({"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"})
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
    }
)
_MULTIPART_ETAG = re.compile(r"^([0-9a-f]{32})-(\d+)$")


def _url(bucket: str, key: str = "") -> str:
    return f"s3://{bucket}/{key}"


def _retry_after(headers: dict[str, str]) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None when absent or unreadable."""
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def translate_error(error: BotoCoreError | ClientError, where: str) -> SidecarError:
    """The sidecar's error for a botocore one; ``where`` (``s3://bucket/key``) starts the message."""
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        meta = error.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode", 0))
        message = f"{where}: {code or 'HTTP ' + str(status)} (HTTP {status})"
        if code in _DIGEST_CODES:
            message += ": the bytes the store got differ from the checksum sent with them (changed on the way)"
        if status >= 500 or status == 429 or code in _TRANSIENT_CODES:
            return TransientError(message, delay_s=_retry_after(meta.get("HTTPHeaders", {})))
        return TransferError(message)
    if isinstance(error, FlexibleChecksumError):
        return TransferError(f"{where}: {error}")
    if isinstance(error, ConnectionError | HTTPClientError | IncompleteReadError | ResponseStreamingError):
        return TransientError(f"{where}: {error}")
    return PermanentError(f"{where}: {error}")


@contextmanager
def _translated(where: str) -> Iterator[None]:
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise translate_error(error, where) from error


_CHECKSUM_FIELDS = ("ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME", "ChecksumSHA1", "ChecksumSHA256")


def _checked_by_client(answer: dict[str, Any]) -> bool:
    """Whether botocore checks this GET's body against a whole-object checksum the store sent (a mismatch raises
    at the body's end). A multipart object's composite checksum (``...-N``) it leaves alone: the ETag check
    covers those, and objects stored without a checksum. An MD5 of what botocore already checks halved the
    download's throughput (bench/sidecar.py)."""
    if answer.get("ChecksumType") == "COMPOSITE":
        return False
    return any(isinstance(value := answer.get(name), str) and "-" not in value for name in _CHECKSUM_FIELDS)


def _check_etag(where: str, actual: str, expected: str) -> None:
    if actual != expected:
        raise TransferError(f"{where}: content hashes to ETag {actual}, the store says {expected}")


class _Behind:
    """Feeds a SHA-256 one chunk behind the reads, in a thread of its own: hashlib releases the GIL while it hashes a
    large buffer, so the hash of chunk n runs while chunk n+1 is read from the network and written (one read of the
    bytes; at most two chunks held)."""

    def __init__(self, sha256: hashlib._Hash, pool: ThreadPoolExecutor) -> None:
        self.sha256 = sha256
        self.pool = pool
        self.pending: Future[None] | None = None

    def update(self, chunk: bytes) -> None:
        self.wait()
        self.pending = self.pool.submit(self.sha256.update, chunk)

    def wait(self) -> None:
        if self.pending is not None:
            self.pending.result()
            self.pending = None


class _Digest:
    """MD5 of the whole stream and, for a multipart ETag, of each part: both ETag forms in one pass."""

    def __init__(self, part_size: int | None) -> None:
        self.part_size = part_size
        self.whole = hashlib.md5(usedforsecurity=False)
        self.part = hashlib.md5(usedforsecurity=False)
        self.part_filled = 0
        self.part_digests: list[bytes] = []

    def update(self, data: bytes) -> None:
        if self.part_size is None:
            self.whole.update(data)
            return
        view = memoryview(data)
        while view:
            take = min(len(view), self.part_size - self.part_filled)
            self.part.update(view[:take])
            self.part_filled += take
            view = view[take:]
            if self.part_filled == self.part_size:
                self._close_part()

    def _close_part(self) -> None:
        self.part_digests.append(self.part.digest())
        self.part = hashlib.md5(usedforsecurity=False)
        self.part_filled = 0

    def etag(self) -> str:
        if self.part_size is None:
            return self.whole.hexdigest()
        if self.part_filled:
            self._close_part()
        combined = hashlib.md5(b"".join(self.part_digests), usedforsecurity=False).hexdigest()
        return f"{combined}-{len(self.part_digests)}"


def file_etag(path: Path, part_size: int | None) -> str:
    """The ETag S3 gives ``path`` uploaded whole (``part_size`` None) or in parts of ``part_size``."""
    with path.open("rb") as stream:
        return stream_etag(stream, part_size)


def stream_etag(stream: IO[bytes], part_size: int | None) -> str:
    """The ETag of ``stream``'s content from its start (it is read to its end)."""
    return stream_digests(stream, part_size)[0]


def stream_digests(stream: IO[bytes], part_size: int | None) -> tuple[str, str]:
    """The ETag and the SHA-256 of ``stream``'s content from its start, in one read to its end."""
    digest = _Digest(part_size)
    sha256 = hashlib.sha256()
    stream.seek(0)
    while chunk := stream.read(_CHUNK):
        digest.update(chunk)
        sha256.update(chunk)
    return digest.etag(), sha256.hexdigest()


class PiecesReader(io.RawIOBase):
    """A seekable, read-only file over byte strings taken as one, that hands out views, not copies: botocore
    reads a request body three times (SHA-256, CRC32, the send)."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        super().__init__()
        self._pieces = [memoryview(piece) for piece in pieces if piece]
        self._starts = list(itertools.accumulate((len(piece) for piece in self._pieces), initial=0))
        self._size = self._starts[-1]
        self._position = 0

    def __len__(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = min(max(base + offset, 0), self._size)
        return self._position

    def read(self, size: int | None = -1) -> memoryview:
        """At most ``size`` bytes from one piece (a short read at its end), or all that is left for -1 or None."""
        if self._position >= self._size:
            return memoryview(b"")
        if size is None or size < 0:
            rest = b"".join(self._pieces)[self._position :]
            self._position = self._size
            return memoryview(rest)
        index = bisect.bisect_right(self._starts, self._position) - 1
        piece, offset = self._pieces[index], self._position - self._starts[index]
        end = min(len(piece), offset + size)
        self._position += end - offset
        return piece[offset:end]


class S3Store:
    """Sync and thread-safe (one botocore client, which is); the asyncio runtime calls it via ``to_thread``."""

    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        self.write_gate: Callable[[str], None] = _always_open
        """Called with ``s3://bucket/key`` before every write; raises where the write must not go (the sidecar's
        :class:`~controller_sidecar.fence.Fence`: a lapsed lease waits, a fenced attempt stores nothing)."""
        session = boto3.session.Session()
        self._client: Any = session.client(
            "s3",
            endpoint_url=settings.endpoint_url,
            aws_access_key_id=settings.access_key,
            aws_secret_access_key=settings.secret_key,
            region_name=settings.region,
            config=Config(
                s3={"addressing_style": "path"},
                signature_version="s3v4",
                # A CRC32 with every upload, checked by the store: the parts of a model upload have no other
                # check on their way (set here, so AWS_REQUEST_CHECKSUM_CALCULATION cannot turn it off).
                request_checksum_calculation="when_supported",
                # ... and the GETs ask for the stored checksum and check the body against it (download).
                response_checksum_validation="when_supported",
                retries={"mode": "standard", "total_max_attempts": 1},
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=max(10, 2 * settings.max_concurrency),
            ),
        )
        threshold = settings.multipart_threshold_mb * MIB
        self._transfer_config = TransferConfig(
            multipart_threshold=threshold,
            multipart_chunksize=max(5 * MIB, min(_PART_SIZE, threshold)),
            max_concurrency=settings.max_concurrency,
            use_threads=True,
        )

    def ensure_bucket(self, bucket: str) -> None:
        """Create ``bucket`` unless this account already has it."""
        try:
            with _translated(_url(bucket)):
                self._client.head_bucket(Bucket=bucket)
        except TransferError:
            LOGGER.info("creating bucket %s", bucket)
        else:
            return
        try:
            self._client.create_bucket(Bucket=bucket)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                raise translate_error(error, _url(bucket)) from error
        except BotoCoreError as error:
            raise translate_error(error, _url(bucket)) from error

    def list(self, location: S3Location) -> list[RemoteObject]:
        """Every object under the location's prefix, in key order."""
        found: list[RemoteObject] = []
        with _translated(str(location)):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=location.bucket, Prefix=location.prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    found.append(RemoteObject(item["Key"], int(item["Size"]), str(item["ETag"]).strip('"')))
        return found

    def head(self, bucket: str, key: str) -> RemoteObject:
        with _translated(_url(bucket, key)):
            answer = self._client.head_object(Bucket=bucket, Key=key)
        return RemoteObject(key, int(answer["ContentLength"]), str(answer["ETag"]).strip('"'))

    def _part_size(self, bucket: str, obj: RemoteObject) -> int | None:
        """None for a single-part ETag; else the size of the object's first part (``HEAD ?partNumber=1``)."""
        match = _MULTIPART_ETAG.match(obj.etag)
        if match is None:
            return None
        with _translated(_url(bucket, obj.key)):
            answer = self._client.head_object(Bucket=bucket, Key=obj.key, PartNumber=1, IfMatch=f'"{obj.etag}"')
        return int(answer["ContentLength"])

    def download(self, bucket: str, obj: RemoteObject, dest: Path) -> int:
        """Fetch ``obj`` into ``dest`` (temp file, fsync, rename) and return its size; as :meth:`download_hashed`
        without the SHA-256 (checkpoints: the provenance names the checkpoint by its marker)."""
        return self._download(bucket, obj, dest, None).size

    def download_hashed(self, bucket: str, obj: RemoteObject, dest: Path) -> HashedObject:
        """Fetch ``obj`` into ``dest`` (temp file, fsync, rename): its size and the SHA-256 of the bytes written,
        hashed as they stream in (no second read)."""
        return self._download(bucket, obj, dest, hashlib.sha256())

    def _download(self, bucket: str, obj: RemoteObject, dest: Path, sha256: hashlib._Hash | None) -> HashedObject:
        """Fetch ``obj`` into ``dest``, feeding ``sha256`` (when given) with every chunk written.

        Raises TransferError when the bytes differ from the listing's size or ETag (or the object was
        replaced since it was listed), TransientError when the connection failed or the body was cut short.
        """
        where = _url(bucket, obj.key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        # A short temp name: ``dest.name`` may already take the file system's whole NAME_MAX.
        fd, temp_name = tempfile.mkstemp(prefix=".", suffix=PARTIAL_SUFFIX, dir=dest.parent)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                received, digest = self._stream(bucket, obj, where, out, sha256)
                out.flush()
                os.fsync(out.fileno())
            if digest is not None:
                _check_etag(where, digest.etag(), obj.etag)
            temp.chmod(0o644)
            temp.rename(dest)
        finally:
            temp.unlink(missing_ok=True)  # only still there when the transfer or its check failed
        fsync_dir(dest.parent)
        return HashedObject(obj.key, received, obj.etag, sha256.hexdigest() if sha256 is not None else "")

    def _stream(
        self, bucket: str, obj: RemoteObject, where: str, out: IO[bytes], sha256: hashlib._Hash | None
    ) -> tuple[int, _Digest | None]:
        """The bytes written to ``out``, and the MD5 digest to check against the ETag: None when botocore checks
        the body itself, against the whole-object checksum the store sent with it."""
        received = 0
        with _translated(where):
            answer = self._client.get_object(Bucket=bucket, Key=obj.key, IfMatch=f'"{obj.etag}"')
            length = int(answer["ContentLength"])
            body = answer["Body"]
            try:
                if length != obj.size:
                    raise TransferError(f"{where}: the store sends {length} bytes, the listing said {obj.size}")
                digest = None if _checked_by_client(answer) else _Digest(self._part_size(bucket, obj))
                with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as pool:
                    behind = None if sha256 is None else _Behind(sha256, pool)
                    while chunk := body.read(_CHUNK):
                        out.write(chunk)
                        if behind is not None:
                            behind.update(chunk)
                        if digest is not None:
                            digest.update(chunk)
                        received += len(chunk)
                    if behind is not None:
                        behind.wait()
            finally:
                body.close()
        if received < length:
            raise TransientError(f"{where}: the connection ended after {received} of {length} bytes")
        return received, digest

    def upload_file(self, path: Path, bucket: str, key: str) -> RemoteObject:
        """Upload ``path`` (in parts above the multipart threshold) and check the stored ETag against it.

        By name: s3transfer then reads each part from disk as it sends it, instead of buffering whole parts in
        memory as it does for an open stream (the scheduler uploads models of hundreds of MB this way).
        """
        with path.open("rb") as stream:
            size, expected, _sha256 = self._expected(stream)
        return self._upload(str(path), bucket, key, size, expected, source=str(path))

    def upload_stream(self, stream: IO[bytes], bucket: str, key: str, *, source: str) -> HashedObject:
        """Upload an open file, from its start, and check the stored ETag; ``source`` names it in errors.

        The sidecar uploads the learner's files this way: opened once without following links
        (:mod:`controller_sidecar.jobfiles`), so what is sent is the file that was checked. The SHA-256 comes
        from the pass that computes the expected ETag, and the stored object must have that ETag: a file changed
        between the two reads is refused, so the digest is that of the stored bytes (docs/provenance.md).
        """
        size, expected, sha256 = self._expected(stream)
        stream.seek(0)
        stored = self._upload(stream, bucket, key, size, expected, source=source)
        return HashedObject(stored.key, stored.size, stored.etag, sha256)

    def _expected(self, stream: IO[bytes]) -> tuple[int, str, str]:
        """The size of ``stream``, the ETag the store should give it and its SHA-256 (read to its end)."""
        size = stream.seek(0, os.SEEK_END)
        config = self._transfer_config
        part_size = None
        if size >= config.multipart_threshold:
            part_size = ChunksizeAdjuster().adjust_chunksize(config.multipart_chunksize, size)
        etag, sha256 = stream_digests(stream, part_size)
        return size, etag, sha256

    def _upload(
        self, what: str | IO[bytes], bucket: str, key: str, size: int, expected: str, *, source: str
    ) -> RemoteObject:
        where = _url(bucket, key)
        self.write_gate(where)
        with _translated(where), TransferManager(self._client, self._transfer_config) as manager:
            manager.upload(what, bucket, key).result()
        stored = self.head(bucket, key)
        if stored.size != size or stored.etag != expected:
            raise TransferError(
                f"{source} -> {where}: stored {stored.size} bytes with ETag {stored.etag}, "
                f"expected {size} bytes with ETag {expected}"
            )
        return stored

    def start_multipart(self, bucket: str, key: str) -> str:
        """A new multipart upload's id: the parts are sent with :meth:`upload_part` as they come."""
        self.write_gate(_url(bucket, key))
        with _translated(_url(bucket, key)):
            return str(self._client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"])

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, pieces: Sequence[bytes]) -> str:
        """Send part ``number`` (1-based; every part but the last at least 5 MiB), made of ``pieces`` in order
        (sent as they are, never joined); its ETag. The store checks the bytes it got against the CRC32 the
        client computed from them and sent along, and refuses a part that differs (BadDigest): a local MD5 of
        each part would only repeat that check, at the cost of a core for a fifth of a second per 100 MB."""
        self.write_gate(_url(bucket, key))
        body = PiecesReader(pieces)
        with _translated(_url(bucket, key)):
            answer = self._client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body)
        return str(answer["ETag"]).strip('"')

    def complete_multipart(self, bucket: str, key: str, upload_id: str, etags: Sequence[str]) -> None:
        self.write_gate(_url(bucket, key))
        parts = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, start=1)]
        with _translated(_url(bucket, key)):
            self._client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )

    def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        """Drop an unfinished upload and the parts it holds."""
        with _translated(_url(bucket, key)):
            self._client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)

    def open_uploads(self, bucket: str, prefix: str, limit: int) -> tuple[OpenUpload, ...]:
        """The unfinished multipart uploads of keys under ``prefix``, at most ``limit`` of them."""
        with _translated(_url(bucket, prefix)):
            pages = self._client.get_paginator("list_multipart_uploads").paginate(
                Bucket=bucket, Prefix=prefix, PaginationConfig={"MaxItems": limit}
            )
            found = tuple(
                OpenUpload(item["Key"], item["UploadId"], item["Initiated"])
                for page in pages
                for item in page.get("Uploads", [])
            )
        return found[:limit]

    def abort_open_uploads(
        self, bucket: str, prefix: str, *, initiated_before: datetime | None = None, limit: int = 1000
    ) -> tuple[OpenUpload, ...]:
        """Abort the unfinished multipart uploads under ``prefix`` begun before ``initiated_before`` (all, when
        None), at most ``limit``; those aborted. One already gone meanwhile (finished or aborted) is no error."""
        uploads = self.open_uploads(bucket, prefix, limit)
        chosen = tuple(u for u in uploads if initiated_before is None or u.initiated < initiated_before)
        for upload in chosen:
            try:
                self.abort_multipart(bucket, upload.key, upload.upload_id)
            except TransferError as e:
                if "NoSuchUpload" not in str(e):
                    raise
        return chosen

    def delete(self, bucket: str, key: str) -> None:
        """Remove one object; one that is not there is no error."""
        self.write_gate(_url(bucket, key))
        with _translated(_url(bucket, key)):
            self._client.delete_object(Bucket=bucket, Key=key)

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        """A small object in one request, with ``Content-MD5`` (the server refuses a mismatch: BadDigest)."""
        self.write_gate(_url(bucket, key))
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode("ascii")
        with _translated(_url(bucket, key)):
            self._client.put_object(Bucket=bucket, Key=key, Body=data, ContentMD5=md5)

    def read_range(self, bucket: str, key: str, first: int, last: int) -> Iterator[bytes]:
        """Bytes ``first..last`` (inclusive) of an object, streamed in chunks of at most 1 MiB.

        The request is sent now (so a caller's retry covers it); the body is read as the chunks are taken.
        A body cut short raises TransientError; a store that sends a different length, TransferError.
        """
        where = _url(bucket, key)
        with _translated(where):
            answer = self._client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")
        length = int(answer["ContentLength"])
        if length != last - first + 1:
            answer["Body"].close()
            raise TransferError(f"{where}: asked for bytes {first}-{last}, the store sends {length}")
        return _chunks(answer["Body"], where, length)

    def get_bytes(self, bucket: str, key: str) -> bytes:
        """A small object, whole; checked against its ETag when that is a plain MD5."""
        where = _url(bucket, key)
        with _translated(where):
            answer = self._client.get_object(Bucket=bucket, Key=key)
            body = answer["Body"]
            try:
                data: bytes = body.read()
            finally:
                body.close()
        etag = str(answer["ETag"]).strip('"')
        if _MULTIPART_ETAG.match(etag) is None and hashlib.md5(data, usedforsecurity=False).hexdigest() != etag:
            raise TransferError(f"{where}: content does not match its ETag {etag}")
        return data


def _chunks(body: Any, where: str, length: int) -> Iterator[bytes]:
    received = 0
    try:
        with _translated(where):
            while chunk := body.read(_CHUNK):
                received += len(chunk)
                yield chunk
    finally:
        body.close()
    if received < length:
        raise TransientError(f"{where}: the connection ended after {received} of {length} bytes")


def _always_open(_where: str) -> None:
    """The write gate of a store no fence guards."""
