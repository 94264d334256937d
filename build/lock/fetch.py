"""Fill the lock cache in parallel: a bounded pool of downloads, each checked by sha256 on its way in.

A download streams into a partial file beside the cache (same file system, so the move in is atomic) while its
sha256 is taken; only a file of the locked sha256, and of the announced size where the source says one, is moved
under that sha256. A short, broken or corrupted download is deleted and fetched again, never used. Two processes
filling one cache at once each write their own partial file; the move of identical bytes under one name is safe.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import requests

from learnerkit_build.lock.cache import DEFAULT_DOWNLOADS, cache_root, cached_path
from learnerkit_build.lock.model import LockError

ATTEMPTS = 3
CHUNK = 1 << 20
TIMEOUT_S = 60.0
"""Connect and read timeout of one request (a stalled read counts as a broken download)."""

STALE_PARTIAL_S = 3600.0

ProgressSink = Callable[[int, int], None]
"""Called with (bytes, files) as they arrive: bytes may be negative when a broken download is thrown away."""


@dataclass(frozen=True)
class Download:
    filename: str
    sha256: str
    url: str
    """http(s):// or file://."""
    size: int | None = None
    """As the source announces it; a download of another size is broken."""


@dataclass(frozen=True)
class FetchReport:
    files: int
    bytes: int
    retried: int
    """Downloads thrown away (short, broken or of another sha256) and fetched again."""


class FetchError(LockError):
    """A locked file could not be fetched whole and with its sha256 from any attempt."""


def partial_root() -> Path:
    return cache_root().parent / "partial"


def fetch_all(
    downloads: Sequence[Download],
    *,
    jobs: int = DEFAULT_DOWNLOADS,
    on_progress: ProgressSink | None = None,
    attempts: int = ATTEMPTS,
    ca_bundle: Path | None = None,
) -> FetchReport:
    """Fetch each download the cache lacks (one per sha256) with at most `jobs` at a time; every failure is
    reported together once the others are done (a FetchError naming each file and its URL)."""
    if jobs < 1 or attempts < 1:
        raise LockError(f"{jobs} concurrent downloads of {attempts} attempts each: 1 or more of each expected")
    unique = {d.sha256: d for d in downloads if not cached_path(d.sha256).is_file()}
    sink = on_progress or (lambda size, files: None)
    local = threading.local()
    counts = {"bytes": 0, "retried": 0}
    lock = threading.Lock()

    def one(download: Download) -> str | None:
        if not hasattr(local, "session"):
            local.session = session(ca_bundle)
        for attempt in range(attempts):
            got, problem = _attempt(download, local.session, sink)
            if problem is None:
                with lock:
                    counts["bytes"] += got
                sink(0, 1)
                return None
            sink(-got, 0)
            if attempt + 1 < attempts:
                with lock:
                    counts["retried"] += 1
        return f"{download.filename} from {download.url}: {problem} ({attempts} attempts)"

    partial_root().mkdir(parents=True, exist_ok=True)
    cache_root().mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="fetch") as pool:
        try:
            failures = [problem for problem in pool.map(one, unique.values()) if problem]
        except KeyboardInterrupt:
            pool.shutdown(cancel_futures=True)  # Ctrl-C: no new download starts; the running ones end theirs
            raise
    if failures:
        raise FetchError("could not fetch into the lock cache: " + "; ".join(failures))
    return FetchReport(files=len(unique), bytes=counts["bytes"], retried=counts["retried"])


def session(ca_bundle: Path | None) -> requests.Session:
    """A session that trusts `ca_bundle` where one is given (a TLS-intercepting proxy), else certifi's roots."""
    made = requests.Session()
    if ca_bundle is not None:
        made.verify = str(ca_bundle)
    return made


def _attempt(download: Download, session: requests.Session, sink: ProgressSink) -> tuple[int, str | None]:
    """(bytes written, None) when the file is in the cache, else (bytes written, what was wrong)."""
    partial = partial_root() / f"{download.sha256}.{uuid.uuid4().hex}"
    digest = hashlib.sha256()
    got = 0
    try:
        with partial.open("wb") as out:
            for chunk in _chunks(download.url, session):
                out.write(chunk)
                digest.update(chunk)
                got += len(chunk)
                sink(len(chunk), 0)
        if download.size is not None and got != download.size:
            return got, f"{got} bytes of the announced {download.size}"
        if digest.hexdigest() != download.sha256:
            return got, f"sha256 {digest.hexdigest()} is not the locked {download.sha256}"
        partial.chmod(0o644)
        partial.replace(cached_path(download.sha256))
    except (OSError, requests.RequestException) as e:
        return got, f"{type(e).__name__}: {e}"
    else:
        return got, None
    finally:
        partial.unlink(missing_ok=True)


def _chunks(url: str, session: requests.Session) -> Iterator[bytes]:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        with Path(unquote(parsed.path)).open("rb") as handle:
            yield from iter(lambda: handle.read(CHUNK), b"")
        return
    with session.get(url, stream=True, timeout=TIMEOUT_S) as response:
        response.raise_for_status()
        yield from response.iter_content(CHUNK)


def clear_stale_partials(max_age_s: float = STALE_PARTIAL_S) -> int:
    """Remove partial files nobody has written to for `max_age_s` (a killed fetch's); returns how many. A live
    download writes every few seconds or fails by its timeout, so its file is never this old."""
    root = partial_root()
    removed = 0
    now = time.time()
    for path in root.iterdir() if root.is_dir() else ():
        with suppress(FileNotFoundError):
            if now - path.stat().st_mtime > max_age_s:
                path.unlink()
                removed += 1
    return removed
