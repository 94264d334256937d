"""A job's provenance checked on the server, as `job verify JOB` checks it, at a bounded cost.

The scheduler keeps a copy of each job's stored files (all but checkpoints, which no statement names: what
`job verify` downloads) in a folder of its own and runs `job verify`'s own `verify_folder` over it with the
platform's keys. A check lists the job's objects once and fetches only those whose ETag or size changed since the
copy was made (and drops those gone from the store); when none changed, the last report stands and nothing is
hashed again. One check runs at a time per job, at most once per ``recheck_s`` however many pages ask, and only
the ``max_jobs`` jobs asked for most recently keep their copies.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from securesystemslib.signer import Key
from starlette.concurrency import run_in_threadpool

from learnerkit.common import engineimages
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.errors import UnknownJobError
from learnerkit.scheduler.facade import SchedulerFacade, StoredFile
from learnerkit.scheduler.provenance.verify import (
    PROVENANCE_FILE,
    DataAnswer,
    ImageAnswer,
    ImageLookup,
    NoProvenanceError,
    VerifyReport,
    sha256_of,
    verify_folder,
)

RECHECK_S = 20.0
"""How often a job's files are listed again while its trust panel is open: a change shows within about this plus
the page's own poll."""
REVERIFY_S = 600.0
"""With nothing changed in the job's listing, the copy is verified again this often all the same: the evaluation
data objects (often large, in the tenant's data store) hashed again and the engine asked for the images."""
MAX_JOBS = 32
FETCHES = 4
"""Files fetched at once into a copy (as `job download` does)."""


@dataclass(frozen=True)
class TrustCheck:
    """One check of a job: `job verify`'s report, or why there is none."""

    checked_at: float
    """Wall-clock time of the check."""
    report: VerifyReport | None = None
    problem: str = ""
    """Why nothing was verified: no provenance yet, the store did not answer."""
    folder: Path | None = None
    """The copy the report was made from (the factsheet and round statements are read from it)."""
    files: int = 0
    fetched: int = 0
    """Files fetched from the store for this check (0: nothing changed since the last)."""
    hashed: int = 0
    """Files `verify_folder` hashed for this check (the others' digests were kept from the last)."""


@dataclass
class _Copy:
    folder: Path
    seen: dict[str, tuple[str, int]] = field(default_factory=dict)
    """path -> (ETag, size) of each file as it was fetched."""
    last: TrustCheck | None = None
    checked_at: float = float("-inf")
    """Monotonic time of the last check."""
    verified_at: float = float("-inf")
    """Monotonic time `verify_folder` last ran over the copy."""
    data: dict[str, tuple[float, DataAnswer]] = field(default_factory=dict)
    """Evaluation data URI -> (when, its answer)."""
    digests: dict[tuple[Path, ...], tuple[tuple[tuple[int, int, int], ...], str]] = field(default_factory=dict)
    """Files of the copy -> ((inode, size, mtime) of each, their SHA-256): a file written anew (temp + rename) has
    a new inode, so its digest is taken again."""
    hashed: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class TrustChecker:
    def __init__(
        self,
        facade: SchedulerFacade,
        keys: Sequence[Key],
        *,
        recheck_s: float = RECHECK_S,
        max_jobs: int = MAX_JOBS,
        clock: Callable[[], float] = time.monotonic,
        images: ImageLookup | None = None,
    ) -> None:
        """``images``: what an image reference names now (default: the local engine, which runs the jobs)."""
        self.facade = facade
        self.images = images or engine_answer
        self.keys = list(keys)
        self.recheck_s = recheck_s
        self.max_jobs = max_jobs
        self.clock = clock
        self._root: Path | None = None
        self._copies: OrderedDict[tuple[str, str], _Copy] = OrderedDict()

    async def check(self, tenant: str, job_id: str) -> TrustCheck:
        """The job's latest check, made now when the last is older than ``recheck_s``. The caller has checked
        that ``tenant`` owns the job (`UnknownJobError` passes through)."""
        copy = self._copy(tenant, job_id)
        async with copy.lock:
            if copy.last is not None and self.clock() - copy.checked_at < self.recheck_s:
                return copy.last
            copy.last = await self._check(tenant, job_id, copy)
            copy.checked_at = self.clock()
            return copy.last

    async def _check(self, tenant: str, job_id: str, copy: _Copy) -> TrustCheck:
        now = time.time()
        if not self.keys:
            return TrustCheck(now, problem="This scheduler publishes no signing key: it signs no provenance.")
        try:
            stored = [f for f in await self.facade.outputs(tenant, job_id) if f.kind != "checkpoints"]
        except UnknownJobError:
            raise
        except LearnerkitError as e:
            return TrustCheck(now, problem=f"The job's files cannot be listed now: {e}")
        if not any(f.path == PROVENANCE_FILE for f in stored):
            if copy.seen:  # the provenance was deleted: start the copy anew once there is one again
                shutil.rmtree(copy.folder, ignore_errors=True)
                copy.folder.mkdir()
                copy.seen.clear()
            return TrustCheck(now, problem="The job has no signed provenance yet: it is written as the job ends.")
        changed = [f for f in stored if copy.seen.get(f.path) != (f.etag, f.size)]
        gone = set(copy.seen) - {f.path for f in stored}
        fresh = self.clock() - copy.verified_at < REVERIFY_S
        if not changed and not gone and fresh and copy.last is not None and copy.last.report is not None:
            return TrustCheck(now, copy.last.report, folder=copy.folder, files=len(stored))
        for path in gone:
            (copy.folder / path).unlink(missing_ok=True)
            del copy.seen[path]
        fetching = asyncio.Semaphore(FETCHES)

        async def fetch(item: StoredFile) -> None:
            async with fetching:
                await self._fetch(tenant, job_id, copy, item)

        try:
            await asyncio.gather(*(fetch(item) for item in changed))
        except LearnerkitError as e:
            return TrustCheck(now, problem=f"The job's files cannot be read now: {e}")
        loop = asyncio.get_running_loop()
        copy.hashed = 0
        try:
            report = await run_in_threadpool(
                verify_folder,
                copy.folder,
                self.keys,
                image_digest=self.images,
                evaluation_data=lambda uri: self._data_answer(loop, tenant, job_id, copy, uri),
                hasher=lambda paths: _kept_digest(copy, paths),
            )
        except NoProvenanceError as e:
            return TrustCheck(now, problem=str(e))
        copy.verified_at = self.clock()
        return TrustCheck(now, report, folder=copy.folder, files=len(stored), fetched=len(changed), hashed=copy.hashed)

    async def _fetch(self, tenant: str, job_id: str, copy: _Copy, item: StoredFile) -> None:
        target = (copy.folder / item.path).resolve()
        if not target.is_relative_to(copy.folder.resolve()):
            return  # the listing never names one, but a path out of the copy is never written
        stream = await self.facade.open_output(tenant, job_id, item.path)
        await run_in_threadpool(_write_atomic, target, stream.chunks)
        copy.seen[item.path] = (item.etag, item.size)

    def _data_answer(
        self, loop: asyncio.AbstractEventLoop, tenant: str, job_id: str, copy: _Copy, uri: str
    ) -> DataAnswer:
        """An evaluation data object hashed as the scheduler streams it (`job verify JOB`'s answer), remembered
        for ``REVERIFY_S``; called from the check's worker thread."""
        kept = copy.data.get(uri)
        if kept is not None and self.clock() - kept[0] < REVERIFY_S:
            return kept[1]
        answer = asyncio.run_coroutine_threadsafe(self._hash_data(tenant, job_id, uri), loop).result()
        copy.data[uri] = (self.clock(), answer)
        return answer

    async def _hash_data(self, tenant: str, job_id: str, uri: str) -> DataAnswer:
        try:
            stream = await self.facade.open_evaluation_data(tenant, job_id, uri)
            return DataAnswer(await run_in_threadpool(_sha256_of_chunks, stream.chunks))
        except LearnerkitError as e:
            return DataAnswer(problem=str(e))

    def _copy(self, tenant: str, job_id: str) -> _Copy:
        key = (tenant, job_id)
        copy = self._copies.get(key)
        if copy is None:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="learnerkit-trust-"))
                weakref.finalize(self, shutil.rmtree, self._root, True)  # at the latest when the process exits
            copy = self._copies[key] = _Copy(Path(tempfile.mkdtemp(dir=self._root)))
            while len(self._copies) > self.max_jobs:
                _, evicted = self._copies.popitem(last=False)
                shutil.rmtree(evicted.folder, ignore_errors=True)
        self._copies.move_to_end(key)
        return copy


def engine_answer(reference: str) -> ImageAnswer:
    """What the local engine holds under an image reference (the scheduler's host runs the jobs' images)."""
    try:
        image_id = engineimages.image_id(reference)
    except engineimages.EngineError as e:
        return ImageAnswer("the engine", problem=str(e))
    return ImageAnswer("the engine", frozenset({image_id}) if image_id else frozenset())


def _kept_digest(copy: _Copy, paths: Sequence[Path]) -> str:
    """The SHA-256 of files of the copy (a log's parts, hashed as one), taken again only when one of them is not
    the file last hashed."""
    identity = tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in (path.stat() for path in paths))
    kept = copy.digests.get(tuple(paths))
    if kept is not None and kept[0] == identity:
        return kept[1]
    copy.hashed += 1
    digest = sha256_of(paths)
    copy.digests[tuple(paths)] = (identity, digest)
    return digest


def _write_atomic(target: Path, chunks: Iterator[bytes]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        Path(temp).replace(target)
    finally:
        Path(temp).unlink(missing_ok=True)  # gone once it replaced the target; a broken write leaves nothing


def _sha256_of_chunks(chunks: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()
