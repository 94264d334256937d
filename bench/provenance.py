"""What hashing the training data as it streams in costs the sidecar: its download with SHA-256 against the same
download without it, in the same run (target: at most 5 % more time, a ratio <= 1.05).

It starts SeaweedFS on loopback, stores ``--mb`` MB of data in ``--files`` objects, and fetches them all with the
sidecar's own store (`S3Store`, four objects at a time as `download_prefix` does), alternating, ``--runs`` times
each way: ``download`` (no hash; what checkpoints use) and ``download_hashed`` (what training data and the model
code use: every chunk written also feeds SHA-256, one chunk behind the reads). The figure is the median of each way
and their ratio. It also prints what the ratio is when no core is idle (the download alone CPU-bound, as on a busy
loopback): 1 + the download's MiB/s over SHA-256's MiB/s a core, with the load average at the time.
Usage: python bench/provenance.py [--mb 256] [--files 16] [--runs 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location
from learnerkit.dev.s3 import SeaweedServer, create_bucket

BUCKET = "bench-provenance"
MIB = 1 << 20
TARGET = 1.05
WORKERS = 4
"""The sidecar's default transfer concurrency."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256, help="the data's total size in MB")
    parser.add_argument("--files", type=int, default=16, help="how many objects it is split into")
    parser.add_argument("--runs", type=int, default=5, help="downloads each way; the median counts")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="lk-bench-provenance-"))
    s3 = SeaweedServer(scratch / "s3")
    s3.start()
    try:
        create_bucket(s3.client(), BUCKET)
        store = S3Store(s3.settings())
        each = args.mb * 1_000_000 // args.files
        for n in range(args.files):
            store.put_bytes(BUCKET, f"data/part-{n:03d}.bin", os.urandom(each))
        objects = store.list(S3Location(BUCKET, "data/"))
        size = sum(obj.size for obj in objects)
        print(f"data: {len(objects)} objects, {size / MIB:.1f} MiB, {WORKERS} at a time")

        def plain(obj: RemoteObject, dest: Path) -> None:
            store.download(BUCKET, obj, dest)

        def hashed(obj: RemoteObject, dest: Path) -> None:
            store.download_hashed(BUCKET, obj, dest)

        def timed(fetch: Callable[[RemoteObject, Path], None], run: int) -> float:
            folder = scratch / f"out-{run}"
            folder.mkdir()
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=WORKERS) as pool:
                list(pool.map(lambda obj: fetch(obj, folder / obj.key.rsplit("/", 1)[-1]), objects))
            seconds = time.perf_counter() - started
            shutil.rmtree(folder)
            return seconds

        timed(hashed, -1)  # warm up: the client's connections, the store's caches
        alone, with_hash = [], []
        for run in range(args.runs):
            alone.append(timed(plain, 2 * run))
            with_hash.append(timed(hashed, 2 * run + 1))
        base, measured = statistics.median(alone), statistics.median(with_hash)
        ratio = measured / base
        for label, seconds, runs in (("download alone", base, alone), ("download + SHA-256", measured, with_hash)):
            print(f"{label:<28}{seconds:>8.3f} s  {size / MIB / seconds:>8.1f} MiB/s  (runs: {_runs(runs)})")
        verdict = "within" if ratio <= TARGET else "OVER"
        print(f"ratio (hashed / alone): {ratio:.3f}; {verdict} the target of {TARGET:.2f}")
        rate, hashing = size / MIB / base, _sha256_rate()
        print(f"SHA-256 alone on this CPU: {hashing:.0f} MiB/s a core; {os.cpu_count()} cores")
        # On loopback the download itself keeps the cores busy (SeaweedFS, botocore, MD5 for the ETag, the disk
        # writes); with no core to spare the hash runs in their stead, however it overlaps with the reads.
        print(
            f"CPU-bound estimate (no idle core): 1 + {rate:.0f} / {hashing:.0f} = {1 + rate / hashing:.3f};"
            f" load average {', '.join(f'{n:.2f}' for n in os.getloadavg())}"
        )
        return 0 if ratio <= TARGET else 1
    finally:
        s3.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _sha256_rate() -> float:
    """What the hash costs without any download: the bound on what hashing can add."""
    block, rounds = os.urandom(8 * MIB), 16
    digest, started = hashlib.sha256(), time.perf_counter()
    for _ in range(rounds):
        digest.update(block)
    return rounds * 8 / (time.perf_counter() - started)


def _runs(seconds: list[float]) -> str:
    return ", ".join(f"{s:.3f}" for s in seconds)


if __name__ == "__main__":
    raise SystemExit(main())
