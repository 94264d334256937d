"""The lock cache's download pool against a real HTTP server on 127.0.0.1: whole files in, broken ones never."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from learnerkit_build.builds import prefetch
from learnerkit_build.builds.prefetch import drop_corrupted
from learnerkit_build.lock.cache import cache_root, cached_path
from learnerkit_build.lock.fetch import Download, FetchError, clear_stale_partials, fetch_all, partial_root
from learnerkit_build.lock.model import LockedDeb, LockedWheel, make_lock
from learnerkit_build.lock.prune import cap_bytes, mark_used, prune
from learnerkit_build.lock.sources import JSON_TYPE, index_downloads, parse_html, parse_json
from learnerkit_build.recipes.render import BuildInputs


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Files:
    """What the server serves: path -> bytes, and how."""

    good: dict[str, bytes] = field(default_factory=dict)
    corrupted: dict[str, bytes] = field(default_factory=dict)
    """Served with one byte changed."""
    truncated: set[str] = field(default_factory=set)
    """Announced whole (Content-Length), half sent, connection closed."""
    corrupted_once: set[str] = field(default_factory=set)
    """Corrupted on the first request only."""
    json_pages: dict[str, object] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    active: int = 0
    most_active: int = 0
    barrier: threading.Barrier | None = None
    guard: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def served() -> Iterator[tuple[Files, str]]:
    files = Files()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path
            with files.guard:
                files.requests[path] += 1
                first = files.requests[path] == 1
                files.active += 1
                files.most_active = max(files.most_active, files.active)
            try:
                if files.barrier is not None:
                    files.barrier.wait(timeout=10)
                self.answer(path, first)
            finally:
                with files.guard:
                    files.active -= 1

        def answer(self, path: str, first: bool) -> None:
            if path in files.json_pages:
                body = json.dumps(files.json_pages[path]).encode()
                self.send_response(200)
                self.send_header("Content-Type", JSON_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            data = files.good.get(path) or files.corrupted.get(path)
            if data is None:
                self.send_error(404)
                return
            if path in files.corrupted or (path in files.corrupted_once and first):
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if path in files.truncated:
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield files, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def serve(files: Files, base: str, name: str, data: bytes, *, size: bool = True) -> Download:
    files.good[f"/{name}"] = data
    return Download(name, sha(data), f"{base}/{name}", len(data) if size else None)


def test_fetches_each_file_once_into_the_cache_with_progress(served: tuple[Files, str]) -> None:
    files, base = served
    a = serve(files, base, "a.whl", os.urandom(3 << 20))
    b = serve(files, base, "b.deb", b"deb bytes")
    seen = {"bytes": 0, "files": 0}
    guard = threading.Lock()

    def progress(size: int, count: int) -> None:
        with guard:
            seen["bytes"] += size
            seen["files"] += count

    # The same file named twice (two images locking one wheel) is fetched once.
    report = fetch_all([a, b, a], jobs=4, on_progress=progress)

    assert (report.files, report.bytes, report.retried) == (2, (3 << 20) + 9, 0)
    assert seen == {"bytes": report.bytes, "files": 2}
    assert files.requests == Counter({"/a.whl": 1, "/b.deb": 1})
    assert cached_path(a.sha256).read_bytes() == files.good["/a.whl"]
    assert list(partial_root().iterdir()) == []
    # Already cached: nothing requested again.
    assert fetch_all([a, b]).files == 0
    assert sum(files.requests.values()) == 2


def test_a_corrupted_download_is_refetched_then_refused_never_cached(served: tuple[Files, str]) -> None:
    files, base = served
    data = b"the locked wheel" * 1000
    files.corrupted["/bad.whl"] = data
    bad = Download("bad.whl", sha(data), f"{base}/bad.whl", len(data))
    seen = {"bytes": 0}

    with pytest.raises(FetchError) as raised:
        fetch_all([bad], on_progress=lambda size, count: seen.__setitem__("bytes", seen["bytes"] + size))

    assert "bad.whl" in str(raised.value) and f"is not the locked {bad.sha256}" in str(raised.value)
    assert files.requests["/bad.whl"] == 3
    assert not cached_path(bad.sha256).exists()
    assert list(partial_root().iterdir()) == []
    assert seen["bytes"] == 0  # thrown-away bytes are taken back from the progress line


def test_a_corruption_on_the_first_try_costs_one_retry(served: tuple[Files, str]) -> None:
    files, base = served
    flaky = serve(files, base, "flaky.whl", b"x" * 5000)
    files.corrupted_once.add("/flaky.whl")

    report = fetch_all([flaky])

    assert (report.files, report.retried) == (1, 1)
    assert cached_path(flaky.sha256).read_bytes() == b"x" * 5000


@pytest.mark.parametrize("announced", [True, False], ids=["size-from-index", "size-from-http-only"])
def test_a_truncated_download_is_never_used(served: tuple[Files, str], announced: bool) -> None:
    files, base = served
    short = serve(files, base, "short.deb", os.urandom(1 << 20), size=announced)
    files.truncated.add("/short.deb")

    with pytest.raises(FetchError, match=r"short\.deb"):
        fetch_all([short], attempts=2)

    assert files.requests["/short.deb"] == 2
    assert not cached_path(short.sha256).exists()
    assert list(partial_root().iterdir()) == []


def test_a_missing_file_is_named_with_its_url(served: tuple[Files, str]) -> None:
    _, base = served
    with pytest.raises(FetchError, match=r"gone\.whl from http://127\.0\.0\.1:\d+/gone\.whl: HTTPError"):
        fetch_all([Download("gone.whl", "0" * 64, f"{base}/gone.whl")], attempts=1)


def test_at_most_jobs_downloads_run_at_once(served: tuple[Files, str]) -> None:
    files, base = served
    downloads = [serve(files, base, f"{n}.whl", f"file {n}".encode()) for n in range(6)]
    files.barrier = threading.Barrier(2)  # each request waits for a second one: two must run together

    fetch_all(downloads, jobs=2)

    assert files.most_active == 2
    assert all(cached_path(d.sha256).is_file() for d in downloads)


def test_two_fills_at_once_share_the_cache_without_corrupting_it(served: tuple[Files, str]) -> None:
    files, base = served
    shared = serve(files, base, "cudnn.whl", os.urandom(2 << 20))
    files.barrier = threading.Barrier(2)  # both fills are mid-download of the same file together
    errors: list[BaseException] = []

    def fill() -> None:
        try:
            fetch_all([shared])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=fill) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert cached_path(shared.sha256).read_bytes() == files.good["/cudnn.whl"]
    assert list(partial_root().iterdir()) == []


def test_a_file_url_is_copied_and_checked(tmp_path: Path) -> None:
    source = tmp_path / "torch.whl"
    source.write_bytes(b"torch" * 100)
    good = Download("torch.whl", sha(b"torch" * 100), source.as_uri())
    fetch_all([good])
    assert cached_path(good.sha256).read_bytes() == b"torch" * 100
    with pytest.raises(FetchError, match="is not the locked"):
        fetch_all([Download("torch.whl", "1" * 64, source.as_uri())], attempts=1)


def test_a_corrupted_cache_entry_is_dropped_so_it_is_fetched_again(served: tuple[Files, str]) -> None:
    files, base = served
    entry = serve(files, base, "e.whl", b"entry bytes")
    fetch_all([entry])
    cached_path(entry.sha256).write_bytes(b"bit rot")

    assert drop_corrupted({entry.sha256}) == 1
    assert fetch_all([entry]).files == 1
    assert cached_path(entry.sha256).read_bytes() == b"entry bytes"
    assert drop_corrupted({entry.sha256}) == 0


def test_stale_partials_go_live_ones_stay() -> None:
    partial_root().mkdir(parents=True)
    stale, live = partial_root() / "a.1", partial_root() / "b.2"
    stale.write_bytes(b"x")
    live.write_bytes(b"y")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    assert clear_stale_partials() == 1
    assert [p.name for p in partial_root().iterdir()] == ["b.2"]


def _entry(name: str, size: int, age_s: float) -> str:
    data = name.encode() * size
    path = cached_path(sha(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return sha(data)


def test_the_cap_removes_the_least_recently_used_never_what_is_needed() -> None:
    old, needed_old, recent = _entry("o", 1000, 300), _entry("n", 1000, 400), _entry("r", 1000, 100)
    before = cached_path(needed_old).stat()
    mark_used([needed_old])  # now the most recent: a build used it
    assert cached_path(needed_old).stat().st_ctime_ns == before.st_ctime_ns  # its remembered hash stays valid

    report = prune(2000, keep={needed_old})

    assert (report.removed, report.freed, report.kept) == (1, 1000, 2000)
    assert sorted(p.name for p in cache_root().iterdir()) == sorted([needed_old, recent])
    # What the selection needs stays even above the cap.
    assert prune(0, keep={needed_old, recent}).kept == 2000
    assert old not in {p.name for p in cache_root().iterdir()}


def test_the_cap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEARNERKIT_LOCK_CACHE_MB", "3")
    assert cap_bytes() == 3 << 20
    monkeypatch.setenv("LEARNERKIT_LOCK_CACHE_MB", "lots")
    with pytest.raises(Exception, match="LEARNERKIT_LOCK_CACHE_MB='lots': a whole number"):
        cap_bytes()


def wheel(name: str, filename: str, data: bytes) -> LockedWheel:
    return LockedWheel(name=name, version="1.0", filename=filename, sha256=sha(data))


def test_urls_come_from_the_index_by_filename_and_sha256(served: tuple[Files, str], tmp_path: Path) -> None:
    files, base = served
    on_index = wheel("numpy", "numpy-1.0-py3-none-any.whl", b"numpy")
    other_bytes = wheel("numpy", "numpy-1.0-py3-none-any.whl", b"a rebuilt numpy")
    nowhere = wheel("absent", "absent-1.0-py3-none-any.whl", b"absent")
    in_folder = wheel("torch", "torch-1.0-py3-none-any.whl", b"torch")
    files.json_pages["/simple/numpy/"] = {
        "files": [
            {"filename": on_index.filename, "url": "../../files/numpy.whl", "hashes": {"sha256": on_index.sha256}}
        ]
    }
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / in_folder.filename).write_bytes(b"torch")
    inputs = BuildInputs(wheelhouses=(folder,), index_url=f"{base}/simple")

    found, left = index_downloads([on_index, nowhere, in_folder], inputs)

    urls = {d.filename: d.url for d in found}
    assert urls == {
        on_index.filename: f"{base}/files/numpy.whl",
        in_folder.filename: (folder / "torch-1.0-py3-none-any.whl").as_uri(),
    }
    assert left == [nowhere]
    # An index file of another sha256 than the lock's is not taken.
    assert index_downloads([other_bytes], inputs) == ([], [other_bytes])


def test_a_pep_503_page_and_a_file_index_are_read(tmp_path: Path) -> None:
    page = '<a href="../../files/x-1.0.whl#sha256=ab">x-1.0.whl</a><a href="nohash.whl">n</a>'
    assert parse_html(page, "https://idx/simple/x/") == {"x-1.0.whl": ("https://idx/files/x-1.0.whl", "ab", None)}
    assert parse_json({"files": [{"filename": "y.whl", "url": "y.whl", "hashes": {}}]}, "https://idx/") == {}
    data = b"from a file index"
    (tmp_path / "simple" / "x").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "x-1.0-py3-none-any.whl").write_bytes(data)
    (tmp_path / "simple" / "x" / "index.html").write_text(
        f'<a href="../../files/x-1.0-py3-none-any.whl#sha256={sha(data)}">x</a>', encoding="utf-8"
    )
    locked = wheel("x", "x-1.0-py3-none-any.whl", data)
    found, left = index_downloads([locked], BuildInputs(index_url=(tmp_path / "simple").as_uri()))
    assert left == []
    fetch_all(found)
    assert cached_path(locked.sha256).read_bytes() == data


def test_a_selection_fetches_a_file_two_images_lock_once_and_replaces_a_corrupted_entry(
    served: tuple[Files, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files, base = served
    cudnn, jax_only, libc = b"cudnn wheel", b"jaxlib wheel", b"libc6 deb"
    for path, data in (("/files/cudnn.whl", cudnn), ("/files/jax.whl", jax_only), ("/pool/libc6.deb", libc)):
        files.good[path] = data
    shared = wheel("nvidia-cudnn", "cudnn.whl", cudnn)
    files.json_pages["/simple/nvidia-cudnn/"] = {
        "files": [{"filename": "cudnn.whl", "url": "/files/cudnn.whl", "hashes": {"sha256": sha(cudnn)}}]
    }
    files.json_pages["/simple/jaxlib/"] = {
        "files": [{"filename": "jax.whl", "url": "/files/jax.whl", "hashes": {"sha256": sha(jax_only)}}]
    }
    deb = LockedDeb("libc6", "2.36", "amd64", "libc6.deb", sha(libc), "image")
    locks = {
        "jax:1-cuda": make_lock("jax:1-cuda", [deb], [shared, wheel("jaxlib", "jax.whl", jax_only)]),
        "torch:1-cuda": make_lock("torch:1-cuda", [deb], [shared]),
    }
    images = [SimpleNamespace(name=name, local_base="debian-bookworm") for name in locks]
    asked_apt: list[list[str]] = []

    def apt_urls(debs: list[LockedDeb], sources: list[str]) -> tuple[list[Download], list[LockedDeb]]:
        asked_apt.append([d.filename for d in debs])
        return [Download(d.filename, d.sha256, f"{base}/pool/{d.filename}", len(libc)) for d in debs], []

    monkeypatch.setattr(prefetch, "image_lock", lambda image: locks[image.name])
    monkeypatch.setattr(prefetch, "deb_downloads", apt_urls)
    inputs = BuildInputs(index_url=f"{base}/simple")
    planned: list[tuple[int, int]] = []

    report = prefetch.fill_selection(tmp_path, images, inputs, on_plan=lambda b, n: planned.append((b, n)))  # type: ignore[arg-type]

    assert files.requests["/files/cudnn.whl"] == 1 and files.requests["/pool/libc6.deb"] == 1
    assert asked_apt == [["libc6.deb"]]
    assert (report.needed, report.present, report.fetched, report.corrupted) == (3, 0, 3, 0)
    assert planned == [(len(libc), 3)]  # wheels from a JSON page without sizes count files, not bytes
    # A second fill fetches nothing; an entry gone bad is replaced.
    cached_path(shared.sha256).write_bytes(b"bit rot")
    again = prefetch.fill_selection(tmp_path, images, inputs)  # type: ignore[arg-type]
    assert (again.present, again.corrupted, again.fetched) == (2, 1, 1)
    assert cached_path(shared.sha256).read_bytes() == cudnn
    assert files.requests["/files/cudnn.whl"] == 2
