"""What hashing the training data as it streams in costs the sidecar: its download with SHA-256 against the same
download without it, in the same run (target: at most 5 % more time, a ratio <= 1.05).

A sidecar fetches its data over a network, so the figure that counts is across a link: SeaweedFS runs in a
network namespace of the benchmark's own (bench/netlink.py), reached over a veth pair shaped with ``tc`` to
``--gbits`` (default 1 and 10 Gbit/s each way), with ``--delay-ms`` one way where the kernel has netem. The
loopback figure is kept beside them: there the download alone keeps every core busy (SeaweedFS, botocore, the
disk writes), so the hash can only take CPU from it.

Each setting stores ``--mb`` MB of data in ``--files`` objects (``--part-mb``: uploaded in parts of that size, as
the AWS CLI does, so the download checks each object's MD5 ETag; else whole, checked by botocore's CRC32) and
fetches them all with the sidecar's own store (`S3Store`, four objects at a time as `download_prefix` does),
alternating, ``--runs`` times each way: ``download`` (no hash; what checkpoints use) and ``download_hashed``
(training data and model code: every chunk written also feeds SHA-256). The figure is the median of each way and
their ratio. Exits 1 when a link's ratio is over the target. Needs root (namespaces) for the link settings.
Usage: python bench/provenance.py [--mb 256] [--files 16] [--runs 5] [--gbits 1,10] [--delay-ms 2] [--part-mb 8]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from netlink import Link, netem_available, veth_link

from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location
from learnerkit.dev.s3 import SeaweedServer, create_bucket

BUCKET = "bench-provenance"
MIB = 1 << 20
TARGET = 1.05
WORKERS = 4
"""The sidecar's default transfer concurrency."""


@dataclass(frozen=True)
class Figure:
    setting: str
    alone: list[float]
    hashed: list[float]
    size: int
    cpu_alone: list[float]
    """This process' CPU seconds (all its threads) in each download alone; SeaweedFS' are not counted."""
    cpu_hashed: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.hashed) / statistics.median(self.alone)

    def rate(self) -> float:
        return self.size / MIB / statistics.median(self.alone)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256, help="the data's total size in MB")
    parser.add_argument("--files", type=int, default=16, help="how many objects it is split into")
    parser.add_argument("--runs", type=int, default=5, help="downloads each way; the median counts")
    parser.add_argument("--gbits", default="1,10", help="link rates in Gbit/s, comma-separated ('' for none)")
    parser.add_argument("--delay-ms", type=float, default=2.0, help="one-way delay added to each rate (0: none)")
    parser.add_argument("--part-mb", type=int, default=0, help="upload each object in parts of this size (MD5 ETag)")
    args = parser.parse_args()
    gbits = [float(g) for g in args.gbits.split(",") if g.strip()]
    scratch = Path(tempfile.mkdtemp(prefix="lk-bench-provenance-"))
    figures: list[Figure] = []
    links: list[Figure] = []
    try:
        with ExitStack() as stack:
            loopback = stack.enter_context(_server(SeaweedServer(scratch / "s3"), args.part_mb))
            link = stack.enter_context(veth_link()) if gbits else None
            remote = None
            if link is not None:
                server = SeaweedServer(scratch / "s3-link", host=link.remote, launcher=link.launcher)
                remote = stack.enter_context(_server(server, args.part_mb))
            stores = [store for store in (loopback, remote) if store is not None]
            objects = _fill(stores, args.mb, args.files, args.part_mb, scratch)
            size = sum(obj.size for obj in objects)
            print(f"data: {len(objects)} objects, {size / MIB:.1f} MiB, {WORKERS} at a time, {_check(args.part_mb)}")
            figures.append(_measure("loopback", loopback, objects, args.runs, scratch, size))
            _print(figures[-1])
            if link is not None and remote is not None:
                delays = [0.0] + ([args.delay_ms] if args.delay_ms else [])
                if args.delay_ms and not netem_available(link):
                    print(f"{args.delay_ms:g} ms delay: not measured, this kernel has no netem qdisc")
                    delays = [0.0]
                for gbit in gbits:
                    for delay in delays:
                        links.append(_over_link(link, gbit, delay, remote, objects, args.runs, scratch, size))
                        _print(links[-1])
        figures += links
        _summary(figures, links)
        return 0 if all(figure.ratio <= TARGET for figure in links) else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _server(server: SeaweedServer, part_mb: int) -> Iterator[S3Store]:
    try:
        server.start()  # inside: a start that fails (or a SIGTERM while it waits) still stops the process
        create_bucket(server.client(), BUCKET)
        yield S3Store(server.settings(multipart_mb=part_mb or 5))
    finally:
        server.stop()


def _fill(stores: list[S3Store], mb: int, files: int, part_mb: int, scratch: Path) -> list[RemoteObject]:
    """The same objects in every store (whole, or in ``part_mb`` parts through a store set to that threshold)."""
    each = mb * 1_000_000 // files
    source = scratch / "part.bin"
    for n in range(files):
        data = os.urandom(each)
        for store in stores:
            if part_mb:
                source.write_bytes(data)
                store.upload_file(source, BUCKET, f"data/part-{n:03d}.bin")
            else:
                store.put_bytes(BUCKET, f"data/part-{n:03d}.bin", data)
    source.unlink(missing_ok=True)
    return stores[0].list(S3Location(BUCKET, "data/"))


def _check(part_mb: int) -> str:
    return f"{part_mb} MiB parts (MD5 ETag checked)" if part_mb else "whole objects (CRC32 checked by botocore)"


def _over_link(
    link: Link,
    gbit: float,
    delay_ms: float,
    store: S3Store,
    objects: list[RemoteObject],
    runs: int,
    scratch: Path,
    size: int,
) -> Figure:
    link.shape(gbit, delay_ms)
    try:
        setting = f"{gbit:g} Gbit/s" + (f", {delay_ms:g} ms" if delay_ms else "")
        return _measure(setting, store, objects, runs, scratch, size)
    finally:
        link.shape(None)


def _measure(setting: str, store: S3Store, objects: list[RemoteObject], runs: int, scratch: Path, size: int) -> Figure:
    def plain(obj: RemoteObject, dest: Path) -> None:
        store.download(BUCKET, obj, dest)

    def hashed(obj: RemoteObject, dest: Path) -> None:
        store.download_hashed(BUCKET, obj, dest)

    def timed(fetch: Callable[[RemoteObject, Path], None]) -> tuple[float, float]:
        folder = Path(tempfile.mkdtemp(prefix="out-", dir=scratch))
        started, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            list(pool.map(lambda obj: fetch(obj, folder / obj.key.rsplit("/", 1)[-1]), objects))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        shutil.rmtree(folder)
        return seconds, cpu

    timed(hashed)  # warm up: the client's connections, the store's caches
    alone, with_hash = [], []
    for _ in range(runs):
        alone.append(timed(plain))
        with_hash.append(timed(hashed))
    return Figure(
        setting,
        [a[0] for a in alone],
        [h[0] for h in with_hash],
        size,
        [a[1] for a in alone],
        [h[1] for h in with_hash],
    )


def _print(figure: Figure) -> None:
    verdict = "within" if figure.ratio <= TARGET else "OVER"
    print(
        f"{figure.setting:<18} alone {statistics.median(figure.alone):7.3f} s {figure.rate():7.1f} MiB/s"
        f"  hashed {statistics.median(figure.hashed):7.3f} s  ratio {figure.ratio:.3f} ({verdict} {TARGET:.2f})"
        f"  runs alone {_runs(figure.alone)}; hashed {_runs(figure.hashed)}"
    )
    cpu_alone, cpu_hashed = statistics.median(figure.cpu_alone), statistics.median(figure.cpu_hashed)
    print(
        f"{'':<18} client CPU: alone {cpu_alone:.3f} s, hashed {cpu_hashed:.3f} s"
        f" (+{cpu_hashed - cpu_alone:.3f} s; SHA-256 of the data alone: {figure.size / MIB / _sha256_rate():.3f} s)"
    )


def _summary(figures: list[Figure], links: list[Figure]) -> None:
    hashing = _sha256_rate()
    load = ", ".join(f"{n:.2f}" for n in os.getloadavg())
    print(f"SHA-256 alone on this CPU: {hashing:.0f} MiB/s a core; {os.cpu_count()} cores; load average {load}")
    # With no idle core (the download alone CPU-bound, as on loopback) the hash runs in the download's stead,
    # however it overlaps with the reads: it adds about the download's rate over the hash's.
    for figure in figures:
        print(
            f"{figure.setting:<18} ratio {figure.ratio:.3f}; were every core busy: 1 + {figure.rate():.0f} / "
            f"{hashing:.0f} = {1 + figure.rate() / hashing:.3f}"
        )
    if links:
        worst = max(links, key=lambda figure: figure.ratio)
        verdict = "within" if worst.ratio <= TARGET else "OVER"
        print(f"over a link: worst ratio {worst.ratio:.3f} ({worst.setting}); {verdict} the target of {TARGET:.2f}")


def _sha256_rate() -> float:
    """What the hash costs without any download: the bound on what hashing can add."""
    block, rounds = os.urandom(8 * MIB), 16
    digest, started = hashlib.sha256(), time.perf_counter()
    for _ in range(rounds):
        digest.update(block)
    return rounds * 8 / (time.perf_counter() - started)


def _runs(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds)


if __name__ == "__main__":
    raise SystemExit(main())
