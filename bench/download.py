"""`job download` throughput: a job's results through the scheduler's REST API against boto3, in the same run.

It starts etcd and SeaweedFS on loopback and the scheduler's API (the real Scheduler and FastAPI app, under
uvicorn) in a child process, submits a job, and stores results for it as a sidecar does
(``<job>/attempt-1/learner-1/results/``). Then, each into a fresh folder on the same disk:

- ``job download``'s own code (the listing, then the files, four at a time, each streamed to a temporary file
  and renamed);
- the object store's own client, boto3's ``download_file`` (its TransferManager: ranged parts, 10 threads);

best of ``--runs`` each, alternating, with the ratio (target >= 0.9), and the scheduler's peak RSS growth
during its downloads against the data's size (it streams: it must not grow with the files).
No Docker: the scheduler's backend has no nodes, so the job ends FAILED (unschedulable) once recorded; its files
are read all the same.
Usage: python bench/download.py [--mb 200] [--files 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from serving import reset_peak, rss_now_mib, rss_peak_mib, scheduler_without_nodes

from learnerkit.scheduler.client.download import download_all

BUCKET = "bench-download"
MIB = 1 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="the results' total size in MB")
    parser.add_argument("--files", type=int, default=8, help="how many files they are split into")
    parser.add_argument("--runs", type=int, default=3, help="downloads each way; the best counts")
    args = parser.parse_args()

    with scheduler_without_nodes(BUCKET, "lk-bench-download-") as served:
        boto, client, child = served.boto, served.client, served.child
        scratch = served.scratch
        job = served.first_submit(served.manifest("download-bench"))
        prefix = f"{job.job_id}/attempt-1/learner-1/results/"
        each = args.mb * 1_000_000 // args.files
        for n in range(args.files):
            boto.put_object(Bucket=BUCKET, Key=f"{prefix}part-{n:03d}.bin", Body=os.urandom(each))
        size = each * args.files
        print(f"results: {args.files} files, {size / MIB:.1f} MiB")

        def through_scheduler(folder: Path) -> None:
            download_all(client, job.job_id, client.list_files(job.job_id, what="results"), folder, lambda _n: None)

        def with_boto3(folder: Path) -> None:
            for listed in boto.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]:
                target = folder / listed["Key"][len(job.job_id) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                boto.download_file(BUCKET, listed["Key"], str(target))

        def timed(download: Callable[[Path], None], run: int) -> float:
            folder = scratch / f"out-{run}"
            started = time.perf_counter()
            download(folder)
            seconds = time.perf_counter() - started
            got = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
            assert got == size, (got, size)
            shutil.rmtree(folder)
            return seconds

        timed(through_scheduler, -1)  # warm up: the scheduler's S3 client and the code paths
        pid = child.pid
        settled = rss_now_mib(pid)
        reset_peak(pid)
        ours, theirs = [], []
        for run in range(args.runs):
            ours.append(timed(through_scheduler, 2 * run))
            theirs.append(timed(with_boto3, 2 * run + 1))
        growth = rss_peak_mib(pid) - settled
        api_rate, boto_rate = size / MIB / min(ours), size / MIB / min(theirs)
        print(f"scheduler RSS at rest: {settled:.0f} MiB; peak growth while serving: {growth:.1f} MiB")
        print(
            f"job download through the scheduler: {api_rate:.0f} MiB/s; boto3 download_file: {boto_rate:.0f} MiB/s"
            f"  (scheduler / boto3 = {api_rate / boto_rate:.2f}, target >= 0.9), best of {args.runs}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
