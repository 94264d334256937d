"""The model code into the job's object store while it is still arriving: a multipart upload fed part by part.

The API hands the scheduler the model part's bytes as they come off the request (``api/multipart.py``); each full
part goes to the store at once, a few at a time, while the next arrives, so receiving and storing overlap.
Nothing is kept: :meth:`StreamedUpload.abort` drops the parts of a refused model, and the object exists only after
:meth:`StreamedUpload.finish`. At most ``(IN_FLIGHT + 1) x PART_SIZE`` bytes are held in memory. The parts go
out on threads of the upload's own, so the default pool (as few as ``os.cpu_count() + 4`` threads) stays free
for the archive check, which runs while the last parts are still being sent (:meth:`StreamedUpload.sent`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor

from controller_sidecar.errors import SidecarError, TransferError
from controller_sidecar.s3store import S3Store

LOGGER = logging.getLogger(__name__)
MIB = 1 << 20
PART_SIZE = 5 * MIB
IN_FLIGHT = 8
"""Parts being sent at once."""


class StreamedUpload:
    def __init__(self, store: S3Store, bucket: str, key: str) -> None:
        self.store = store
        self.bucket = bucket
        self.key = key
        self.size = 0
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._upload_id: str | None = None
        self._sends: list[asyncio.Task[str]] = []
        self._slots = asyncio.Semaphore(IN_FLIGHT)
        self._senders = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="model-upload")
        self._etags: list[str] = []

    async def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._pending.append(chunk)
        self._pending_size += len(chunk)
        if self._pending_size >= PART_SIZE:
            await self._send(self._take())

    async def sent(self) -> None:
        """Every byte written is in the store as a part (an upload of more than one part): nothing is visible
        until :meth:`finish`."""
        if self._upload_id is None:
            return
        if self._pending:
            await self._send(self._take())
        self._etags = list(await asyncio.gather(*self._sends))
        self._senders.shutdown(wait=False)

    async def finish(self) -> str:
        """Send what is left and complete the object; its ETag, checked against what was sent."""
        where = f"s3://{self.bucket}/{self.key}"
        if self._upload_id is None:
            data = b"".join(self._take())  # under PART_SIZE
            await asyncio.to_thread(self.store.put_bytes, self.bucket, self.key, data)
            expected = hashlib.md5(data, usedforsecurity=False).hexdigest()
        else:
            await self.sent()
            etags = self._etags
            await asyncio.to_thread(self.store.complete_multipart, self.bucket, self.key, self._upload_id, etags)
            combined = hashlib.md5(b"".join(bytes.fromhex(e) for e in etags), usedforsecurity=False).hexdigest()
            expected = f"{combined}-{len(etags)}"
        self._take()
        self._senders.shutdown(wait=False)
        stored = await asyncio.to_thread(self.store.head, self.bucket, self.key)
        if stored.size != self.size or stored.etag != expected:
            raise TransferError(
                f"{where}: stored {stored.size} bytes with ETag {stored.etag}, sent {self.size} with ETag {expected}"
            )
        return stored.etag

    async def abort(self) -> None:
        """Drop every part sent (the object never existed); a failure to do so is logged, not raised. The parts
        in flight (a few) are let finish first: one landing after the abort would start the upload again."""
        await asyncio.gather(*self._sends, return_exceptions=True)
        self._senders.shutdown(wait=False)
        self._take()
        if self._upload_id is not None:
            try:
                await asyncio.to_thread(self.store.abort_multipart, self.bucket, self.key, self._upload_id)
            except SidecarError as e:
                LOGGER.warning("could not abort the upload of s3://%s/%s: %s", self.bucket, self.key, e)

    def _take(self) -> list[bytes]:
        """The chunks written since the last part: parts of at least ``PART_SIZE`` (S3 lets them differ in
        size), so a chunk is never split nor copied."""
        part = self._pending
        self._pending = []
        self._pending_size = 0
        return part

    async def _send(self, part: list[bytes]) -> None:
        if self._upload_id is None:
            self._upload_id = await asyncio.to_thread(self.store.start_multipart, self.bucket, self.key)
        for sent in [s for s in self._sends if s.done()]:
            sent.result()  # a failed part fails the upload now, not at the end
        await self._slots.acquire()
        number = len(self._sends) + 1
        upload_id = self._upload_id
        self._sends.append(asyncio.create_task(self._part(upload_id, number, part)))

    async def _part(self, upload_id: str, number: int, part: list[bytes]) -> str:
        """The part's ETag (its MD5, checked by the store adapter as it is sent)."""
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._senders, self.store.upload_part, self.bucket, self.key, upload_id, number, part
            )
        finally:
            self._slots.release()
