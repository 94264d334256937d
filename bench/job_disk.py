"""What sizing ``/job`` to ``storage`` costs a job's start on Docker: the sized volume (sparse file, mkfs.ext4,
tune2fs, debugfs, losetup, the engine's volume) against a plain volume, measured in the same run, rounds
interleaved.

Two figures per kind, each the median of the rounds: making and removing the volume alone, and the same with
one container of IMAGE started on it at ``/job`` and waited for (the engine mounts the loop device and copies
the image's ``/job`` folders into it, as for a learner). Needs root and a local engine (learnerkit.pair.jobdisk).

Usage: python bench/job_disk.py IMAGE [--rounds 15] [--storage-mib 10240]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from learnerkit.common.engine import engine
from learnerkit.pair.jobdisk import JobDiskSettings, job_volume, remove_volume

LABELS = {"io.learnerkit.bench": "job-disk"}


def make(client: Any, settings: JobDiskSettings, storage: int | None) -> str:
    name = f"lk-bench-{uuid.uuid4().hex[:10]}-job"
    path = settings.state_dir / "bench" / f"{name}.ext4"
    job_volume(client, name, LABELS, "bench", storage, settings, path)
    return name


def volume_only(client: Any, settings: JobDiskSettings, storage: int | None, image: str) -> None:
    remove_volume(client.api, make(client, settings, storage))


def with_container(client: Any, settings: JobDiskSettings, storage: int | None, image: str) -> None:
    name = make(client, settings, storage)
    try:
        client.containers.run(
            image,
            entrypoint=["ls", "/job"],
            volumes={name: {"bind": "/job", "mode": "rw"}},
            network_mode="none",
            labels=LABELS,
            remove=True,
        )
    finally:
        remove_volume(client.api, name)


def timed(step: Callable[[], None]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("image")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--storage-mib", type=int, default=10240)
    args = parser.parse_args()
    client = engine()
    storage = args.storage_mib << 20
    with tempfile.TemporaryDirectory(prefix="lk-bench-disks-") as folder:
        settings = JobDiskSettings(state_dir=Path(folder))
        print(f"storage {args.storage_mib} MiB, {args.rounds} rounds, medians")
        for what, run in (("volume alone", volume_only), ("volume + a container on it", with_container)):
            plain: list[float] = []
            sized: list[float] = []
            run(client, settings, None, args.image)  # warm the image and the tools' pages
            for _ in range(args.rounds):
                plain.append(timed(partial(run, client, settings, None, args.image)))
                sized.append(timed(partial(run, client, settings, storage, args.image)))
            base, cost = statistics.median(plain), statistics.median(sized)
            print(
                f"{what:<28} plain {base * 1000:8.1f} ms   sized {cost * 1000:8.1f} ms   "
                f"ratio {cost / base:5.2f}   (+{(cost - base) * 1000:.1f} ms per learner)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
