"""Transfers against a real S3 server (SeaweedFS), with faults injected by a proxy in front of it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from controller_sidecar.checkpointsync import restore_latest_checkpoint, upload_checkpoints
from controller_sidecar.download import TransferStats, download_prefix
from controller_sidecar.errors import TransferError, TransientError, UnsafePathError
from controller_sidecar.retry import Backoff
from controller_sidecar.s3store import PARTIAL_SUFFIX, RemoteObject, S3Store
from controller_sidecar.settings import S3Location, S3Settings
from tests.servers.proxy import FaultyProxy
from tests.servers.s3 import SeaweedServer, free_ports
from tests.waiting import wait_until

pytestmark = pytest.mark.services

REPO = Path(__file__).resolve().parents[3]
BUCKET = "learnerkit-data"
PREFIX = "mnist/"
BIG_KEY = f"{PREFIX}shards/big.bin"
BIG_SIZE = 12 * 1024 * 1024 + 4321
FAST = Backoff(initial_s=0.05, maximum_s=0.5, max_attempts=None, deadline_s=120)


@dataclass(frozen=True)
class DataSet:
    location: S3Location
    contents: dict[str, bytes]
    """Relative path below the prefix -> bytes."""


@pytest.fixture(scope="module")
def dataset(s3_server: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> DataSet:
    """49 small files and one above the multipart threshold, uploaded with the code under test."""
    store = S3Store(s3_server.settings())
    store.ensure_bucket(BUCKET)
    rng = random.Random(7)
    contents: dict[str, bytes] = {}
    for i in range(49):
        data = rng.randbytes(rng.randrange(0, 96 * 1024))
        contents[f"part-{i // 10}/small-{i:03d}.bin"] = data
        store.put_bytes(BUCKET, f"{PREFIX}part-{i // 10}/small-{i:03d}.bin", data)
    big = tmp_path_factory.mktemp("upload") / "big.bin"
    big.write_bytes(rng.randbytes(BIG_SIZE))
    stored = store.upload_file(big, BUCKET, BIG_KEY)
    assert stored.etag.endswith("-3"), stored
    contents[BIG_KEY.removeprefix(PREFIX)] = big.read_bytes()
    return DataSet(S3Location(BUCKET, PREFIX), contents)


def assert_complete(dest: Path, dataset: DataSet) -> None:
    found = {p.relative_to(dest).as_posix(): p for p in dest.rglob("*") if p.is_file()}
    assert sorted(found) == sorted(dataset.contents)
    for relative, data in dataset.contents.items():
        assert hashlib.sha256(found[relative].read_bytes()).digest() == hashlib.sha256(data).digest(), relative


def recorded_keys(state_file: Path) -> set[str]:
    try:
        return set(json.loads(state_file.read_text())["objects"])
    except (FileNotFoundError, ValueError):
        return set()


def expected_digests(dataset: DataSet) -> dict[str, str]:
    return {PREFIX + k: hashlib.sha256(data).hexdigest() for k, data in dataset.contents.items()}


class ChangedAfterHashing(io.BytesIO):
    """A file the learner changes after the sidecar's first read (the one that hashes it): its second read, the
    upload's, sees other bytes."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads_to_end = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        if not chunk:
            self.reads_to_end += 1
            if self.reads_to_end == 1:
                self.getbuffer()[0] ^= 0xFF
        return chunk


def test_an_upload_gives_the_sha256_of_the_stored_bytes(s3_server: SeaweedServer) -> None:
    store = S3Store(s3_server.settings())
    store.ensure_bucket(BUCKET)
    data = random.Random(3).randbytes(200_000)
    stored = store.upload_stream(io.BytesIO(data), BUCKET, "results/model.bin", source="model.bin")
    assert stored.sha256 == hashlib.sha256(store.get_bytes(BUCKET, "results/model.bin")).hexdigest()
    assert stored.sha256 == hashlib.sha256(data).hexdigest()


def test_a_file_changed_after_it_was_hashed_is_not_stored_under_that_hash(s3_server: SeaweedServer) -> None:
    store = S3Store(s3_server.settings())
    store.ensure_bucket(BUCKET)
    with pytest.raises(TransferError, match=r"model\.bin -> .*expected"):
        store.upload_stream(ChangedAfterHashing(b"weights" * 1000), BUCKET, "results/changed.bin", source="model.bin")


def download(store: S3Store, dataset: DataSet, dest: Path, state: Path, **kwargs: object) -> TransferStats:
    return download_prefix(store, dataset.location, dest, state_file=state, concurrency=4, backoff=FAST, **kwargs)  # type: ignore[arg-type]


def test_download_prefix_verifies_every_file_and_skips_them_next_time(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, dataset: DataSet, tmp_path: Path
) -> None:
    store = S3Store(s3_server.settings(faulty_s3.endpoint_url))
    seen: list[int] = []
    stats = download(store, dataset, tmp_path / "data", tmp_path / "state.json", on_bytes=seen.append)
    assert (stats.files, stats.skipped, stats.retries) == (50, 0, 0)
    assert stats.bytes == sum(seen) == sum(len(d) for d in dataset.contents.values())
    assert_complete(tmp_path / "data", dataset)
    assert recorded_keys(tmp_path / "state.json") == {PREFIX + k for k in dataset.contents}
    assert stats.digests == expected_digests(dataset)

    faulty_s3.reset_counts()
    again = download(store, dataset, tmp_path / "data", tmp_path / "state.json")
    assert (again.files, again.skipped) == (0, 50)
    assert again.digests == expected_digests(dataset), "skipped objects keep the digests taken as they streamed"
    assert faulty_s3.count("GET", f"/{BUCKET}/{PREFIX}") == 0
    assert faulty_s3.count("GET", f"/{BUCKET}?") + faulty_s3.count("GET", f"/{BUCKET}/?") >= 1  # only listing


def test_sidecar_killed_mid_download_resumes_without_refetching(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, dataset: DataSet, tmp_path: Path
) -> None:
    dest, state = tmp_path / "data", tmp_path / "control" / "download.json"
    hold = faulty_s3.hold_matching("GET", "/big.bin", after_bytes=3 * 1024 * 1024)
    env = {**os.environ, "S3_ACCESS_KEY": s3_server.access_key, "S3_SECRET_KEY": s3_server.secret_key}
    argv = [
        sys.executable,
        "-m",
        "tests.integration.controller_sidecar.download_child",
        faulty_s3.endpoint_url,
        BUCKET,
        PREFIX,
    ]
    child = subprocess.Popen([*argv, str(dest), str(state)], cwd=REPO, env=env)
    try:
        wait_until(hold.reached.is_set, timeout=60, message="the child to be half-way through big.bin")
        wait_until(lambda: len(recorded_keys(state)) == 49, timeout=60, message="the small files to be recorded")
        wait_until(lambda: list(dest.rglob(f"*{PARTIAL_SUFFIX}")), message="a partial file of big.bin")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        hold.release.set()
    assert child.returncode == -signal.SIGKILL
    done_before = recorded_keys(state)

    faulty_s3.reset_counts()
    store = S3Store(s3_server.settings(faulty_s3.endpoint_url))
    stats = download(store, dataset, dest, state)
    assert (stats.files, stats.skipped) == (1, 49)
    for key in done_before:
        assert faulty_s3.count("GET", f"/{BUCKET}/{key}") == 0, f"{key} was fetched again"
    assert faulty_s3.count("GET", "/big.bin") == 1
    assert not list(dest.rglob(f"*{PARTIAL_SUFFIX}"))
    assert_complete(dest, dataset)
    assert stats.digests == expected_digests(dataset)


def test_server_outage_mid_transfer_is_retried(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, dataset: DataSet, tmp_path: Path
) -> None:
    store = S3Store(s3_server.settings(faulty_s3.endpoint_url))
    hold = faulty_s3.hold_matching("GET", "/big.bin", after_bytes=1024 * 1024)
    retries = threading.Semaphore(0)
    outcome: list[TransferStats | BaseException] = []

    def run() -> None:
        try:
            outcome.append(
                download(store, dataset, tmp_path / "data", tmp_path / "state.json", on_retry=retries.release)
            )
        except BaseException as error:  # handed to the test thread
            outcome.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        wait_until(hold.reached.is_set, timeout=60, message="big.bin to be half-way")
        s3_server.stop()
        hold.cut = True
        hold.release.set()
        wait_until(lambda: retries.acquire(blocking=False), timeout=60, message="a retry while the server is down")
        wait_until(lambda: retries.acquire(blocking=False), timeout=60, message="a second retry")
    finally:
        hold.release.set()
        if s3_server.process is None:
            s3_server.start()
    worker.join(timeout=120)
    assert len(outcome) == 1
    stats = outcome[0]
    assert isinstance(stats, TransferStats), stats
    assert stats.retries >= 2
    assert stats.files + stats.skipped == 50
    assert_complete(tmp_path / "data", dataset)


def test_503_answers_are_retried_and_nothing_is_lost(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, dataset: DataSet, tmp_path: Path
) -> None:
    store = S3Store(s3_server.settings(faulty_s3.endpoint_url))
    faulty_s3.fail_next(1, retry_after=1)  # the listing, which must then wait the second it was asked to
    faulty_s3.fail_matching("GET", "/small-00", times=6)
    faulty_s3.fail_matching(None, "/big.bin", times=2)
    stats = download(store, dataset, tmp_path / "data", tmp_path / "state.json")
    assert stats.retries == 9
    assert stats.seconds >= 1.0
    assert stats.files == 50
    assert_complete(tmp_path / "data", dataset)


@pytest.mark.parametrize(
    ("relative", "evidence"),
    [
        ("part-1/small-013.bin", "did not match calculated checksum"),  # botocore's check of the stored CRC32
        ("shards/big.bin", "content hashes to ETag"),  # multipart: composite CRC32, so our ETag check
    ],
)
def test_a_corrupted_object_is_refused(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, dataset: DataSet, tmp_path: Path, relative: str, evidence: str
) -> None:
    store = S3Store(s3_server.settings(faulty_s3.endpoint_url))
    faulty_s3.corrupt_matching("GET", f"/{relative}")
    with pytest.raises(TransferError, match=rf"s3://{BUCKET}/{PREFIX}{relative}: .*{evidence}"):
        download(store, dataset, tmp_path / "data", tmp_path / "state.json")
    assert not (tmp_path / "data" / relative).exists()
    assert not list((tmp_path / "data").rglob(f"*{PARTIAL_SUFFIX}"))
    assert f"{PREFIX}{relative}" not in recorded_keys(tmp_path / "state.json")


def test_a_corrupted_object_stored_without_a_checksum_is_refused_by_its_etag(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, tmp_path: Path
) -> None:
    """An object an older client stored with no checksum of its own: nothing but the MD5 of what arrives, against
    the listing's ETag, can tell that its bytes changed on the way."""
    older = boto3.client(
        "s3",
        endpoint_url=s3_server.endpoint_url,
        aws_access_key_id=s3_server.access_key,
        aws_secret_access_key=s3_server.secret_key,
        region_name="us-east-1",
        config=Config(request_checksum_calculation="when_required", s3={"addressing_style": "path"}),
    )
    older.put_object(Bucket=BUCKET, Key="unchecked/weights.bin", Body=os.urandom(300_000))
    store = S3Store(s3_server.settings(faulty_s3.endpoint_url))
    faulty_s3.corrupt_matching("GET", "/unchecked/weights.bin")
    with pytest.raises(TransferError, match=rf"s3://{BUCKET}/unchecked/weights.bin: content hashes to ETag"):
        download_prefix(
            store,
            S3Location(BUCKET, "unchecked/"),
            tmp_path / "data",
            state_file=tmp_path / "state.json",
            concurrency=2,
            backoff=FAST,
        )
    assert not list((tmp_path / "data").rglob("*.bin*"))


def test_a_multipart_part_changed_on_the_way_is_refused_by_the_store(s3_server: SeaweedServer) -> None:
    """The model upload sends parts without hashing them itself: the CRC32 the client sends along is what the
    store checks, so a byte changed between the scheduler and the store must fail that part, and the part sent
    again must make the object whole."""
    proxy = FaultyProxy(s3_server.endpoint_url)
    try:
        store = S3Store(s3_server.settings(proxy.endpoint_url))
        store.ensure_bucket(BUCKET)
        key = "models/changed-on-the-way.zip"
        first, second = os.urandom(5 * 1024 * 1024), os.urandom(1000)
        upload_id = store.start_multipart(BUCKET, key)
        proxy.corrupt_requests_matching("PUT", "partNumber=1", times=1)
        with pytest.raises(TransferError, match=r"BadDigest.*differ from the checksum sent"):
            store.upload_part(BUCKET, key, upload_id, 1, [first[:12345], first[12345:]])
        etags = [
            store.upload_part(BUCKET, key, upload_id, 1, [first[:12345], first[12345:]]),
            store.upload_part(BUCKET, key, upload_id, 2, [second]),
        ]
        store.complete_multipart(BUCKET, key, upload_id, etags)
        assert store.get_bytes(BUCKET, key) == first + second
        assert proxy.count("PUT", "partNumber=1") == 2
    finally:
        proxy.close()


def test_an_object_replaced_since_it_was_listed_is_refused(s3_server: SeaweedServer, tmp_path: Path) -> None:
    store = S3Store(s3_server.settings())
    store.ensure_bucket("learnerkit-replace")
    store.put_bytes("learnerkit-replace", "k.bin", b"first version")
    [listed] = store.list(S3Location("learnerkit-replace", "k"))
    store.put_bytes("learnerkit-replace", "k.bin", b"second version, longer")
    with pytest.raises(TransferError, match=r"s3://learnerkit-replace/k\.bin: PreconditionFailed"):
        store.download("learnerkit-replace", listed, tmp_path / "k.bin")
    lying = RemoteObject("k.bin", 5, store.list(S3Location("learnerkit-replace", "k"))[0].etag)
    with pytest.raises(TransferError, match="sends 22 bytes, the listing said 5"):
        store.download("learnerkit-replace", lying, tmp_path / "k.bin")
    assert list(tmp_path.iterdir()) == []


def test_keys_that_are_a_file_and_a_folder_are_refused_naming_both(s3_server: SeaweedServer, tmp_path: Path) -> None:
    store = S3Store(s3_server.settings())
    store.ensure_bucket("learnerkit-clash")
    store.put_bytes("learnerkit-clash", "set/a", b"a file")
    store.put_bytes("learnerkit-clash", "set/a/b", b"a file below the file")
    both = r"s3://learnerkit-clash/set/a/b: .* file of s3://learnerkit-clash/set/a "
    with pytest.raises(UnsafePathError, match=both):
        download_prefix(
            store,
            S3Location("learnerkit-clash", "set/"),
            tmp_path / "data",
            state_file=tmp_path / "state.json",
            concurrency=2,
            backoff=FAST,
        )
    assert not (tmp_path / "data").exists()


def test_a_key_with_a_name_of_250_bytes_is_downloaded(s3_server: SeaweedServer, tmp_path: Path) -> None:
    """The partial file's name must not grow with the object's: 250 bytes plus a prefix would not fit."""
    store = S3Store(s3_server.settings())
    store.ensure_bucket("learnerkit-long")
    name = "n" * 250
    store.put_bytes("learnerkit-long", f"set/{name}", b"long name")
    stats = download_prefix(
        store,
        S3Location("learnerkit-long", "set/"),
        tmp_path / "data",
        state_file=tmp_path / "state.json",
        concurrency=1,
        backoff=FAST,
    )
    assert stats.files == 1
    assert (tmp_path / "data" / name).read_bytes() == b"long name"


def test_permanent_errors_name_the_object(s3_server: SeaweedServer) -> None:
    store = S3Store(s3_server.settings())
    with pytest.raises(TransferError, match="s3://learnerkit-nobucket/a/b: NoSuchBucket"):
        store.get_bytes("learnerkit-nobucket", "a/b")
    store.ensure_bucket("learnerkit-errors")
    with pytest.raises(TransferError, match="s3://learnerkit-errors/missing: NoSuchKey"):
        store.get_bytes("learnerkit-errors", "missing")
    stranger = S3Store(S3Settings(endpoint_url=s3_server.endpoint_url, access_key="x", secret_key="y"))
    with pytest.raises(TransferError, match=r"HTTP 403"):
        stranger.get_bytes("learnerkit-errors", "missing")


def test_nothing_listening_is_a_transient_error() -> None:
    [port] = free_ports(1)
    store = S3Store(S3Settings(endpoint_url=f"http://127.0.0.1:{port}", access_key="x", secret_key="y"))
    with pytest.raises(TransientError, match="s3://b/k: "):
        store.get_bytes("b", "k")


def make_checkpoint(root: Path, step: int, seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    files = {"model.pt": rng.randbytes(200_000), "optim/state.bin": rng.randbytes(50_000), "meta.json": b"{}"}
    folder = root / f"ckpt-{step:010d}"
    for relative, data in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)
    return files


def test_checkpoint_round_trip_never_restores_a_half_uploaded_one(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, tmp_path: Path
) -> None:
    location = S3Location("learnerkit-results", "job-1/learner-1/checkpoints/")
    direct = S3Store(s3_server.settings())
    direct.ensure_bucket(location.bucket)
    local = tmp_path / "checkpoints"
    local.mkdir()
    expected = {10: make_checkpoint(local, 10, 1), 20: make_checkpoint(local, 20, 2)}
    (local / ".tmp-ckpt-0000000030-abc").mkdir()
    (local / ".tmp-ckpt-0000000030-abc" / "model.pt").write_bytes(b"in progress")
    state = tmp_path / "control" / "checkpoints.json"

    assert upload_checkpoints(direct, local, location, state_file=state) == ["ckpt-0000000010", "ckpt-0000000020"]
    assert upload_checkpoints(direct, local, location, state_file=state) == []

    # Step 30 completes locally, but its upload dies before the marker: it must never be restored.
    (local / ".tmp-ckpt-0000000030-abc").rename(local / "ckpt-0000000030")
    faulty_s3.fail_matching("PUT", "ckpt-0000000030/.complete")
    flaky = S3Store(s3_server.settings(faulty_s3.endpoint_url))
    with pytest.raises(TransientError, match=r"ckpt-0000000030/\.complete"):
        upload_checkpoints(flaky, local, location, state_file=state, backoff=Backoff(initial_s=0.01, max_attempts=2))
    keys = {o.key.removeprefix(location.prefix) for o in direct.list(location)}
    assert "ckpt-0000000030/model.pt" in keys
    assert "ckpt-0000000030/.complete" not in keys

    restored = tmp_path / "resumed"
    step = restore_latest_checkpoint(direct, location, restored, concurrency=4, backoff=FAST)
    assert step == 20
    folder = restored / "ckpt-0000000020"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == sorted(expected[20])
    for relative, data in expected[20].items():
        assert (folder / relative).read_bytes() == data
    assert [p.name for p in restored.iterdir()] == ["ckpt-0000000020"]

    # The next upload round finishes step 30; now it is the one restored.
    assert upload_checkpoints(direct, local, location, state_file=state) == ["ckpt-0000000030"]
    assert restore_latest_checkpoint(direct, location, restored, concurrency=4, backoff=FAST) == 30
    newest = "ckpt-0000000030/model.pt"
    assert (restored / newest).read_bytes() == (local / newest).read_bytes()

    # The learner writes step 30 again (a new folder renamed over the old one): uploaded again.
    rewrite = local / ".tmp-ckpt-0000000030-new"
    make_checkpoint(rewrite, 30, 3)
    (local / "ckpt-0000000030").rename(local / ".tmp-old")
    (rewrite / "ckpt-0000000030").rename(local / "ckpt-0000000030")
    assert upload_checkpoints(direct, local, location, state_file=state) == ["ckpt-0000000030"]
    assert upload_checkpoints(direct, local, location, state_file=state) == []


def test_restore_finds_nothing_in_an_empty_location(s3_server: SeaweedServer, tmp_path: Path) -> None:
    store = S3Store(s3_server.settings())
    store.ensure_bucket("learnerkit-results")
    location = S3Location("learnerkit-results", "job-empty/checkpoints/")
    assert restore_latest_checkpoint(store, location, tmp_path / "c", concurrency=2, backoff=FAST) is None
