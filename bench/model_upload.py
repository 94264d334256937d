"""`job submit MANIFEST MODEL` with a 100 MB model zip, through the real API into the real object store.

It starts etcd and SeaweedFS on loopback and the scheduler's API (the real Scheduler and FastAPI app, under
uvicorn) in a child process. Then, alternating, several times each:

- a submit with the model through the API (`SchedulerClient.submit(model=...)`, as `job submit` sends it):
  multipart, parts sent to the job's results store as they arrive, checked, the job recorded;
- a plain boto3 ``upload_file`` of the same zip to the same SeaweedFS (the object store's own client);

and prints the median throughput of each, their ratio (target >= 0.9), and the scheduler process's peak RSS
growth during the submits (its ``VmHWM``, reset before each), against the zip's size: it must not grow by it.

No Docker: the scheduler's backend has no nodes, so each job ends FAILED (unschedulable) once recorded.
Usage: python bench/model_upload.py [--mb 100] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import zipfile
from pathlib import Path

from serving import reset_peak, rss_now_mib, rss_peak_mib, scheduler_without_nodes

BUCKET = "bench-models"
MIB = 1 << 20


def write_model(path: Path, total: int) -> None:
    """A zip of incompressible files (``train.py`` and weights), ``total`` bytes of content, stored as is."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("train.py", "print('training')\n")
        part, written = 16 * MIB, 0
        while written < total:
            size = min(part, total - written)
            zf.writestr(f"weights/part-{written // part:03d}.bin", os.urandom(size))
            written += size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100, help="the model zip's size in MB")
    parser.add_argument("--runs", type=int, default=5, help="submits and plain uploads, each")
    args = parser.parse_args()

    with scheduler_without_nodes(BUCKET, "lk-bench-model-") as served:
        boto, client = served.boto, served.client
        model, small = served.scratch / "model.zip", served.scratch / "small.zip"
        write_model(model, args.mb * 1_000_000)
        write_model(small, 30_000_000)
        size = model.stat().st_size
        child = served.child
        text = served.manifest("model-upload-bench", "python3 train.py")
        # Warm up: the S3 client, the code paths, the worker threads and their allocator arenas.
        served.first_submit(text, model=small)
        boto.upload_file(str(small), BUCKET, "baseline/warm.zip")
        print(f"model: {size / MIB:.1f} MiB zip")

        pid = child.pid
        api_times, boto_times, growths = [], [], []
        settled = rss_now_mib(pid)
        for run in range(args.runs):
            settled = rss_now_mib(pid)
            reset_peak(pid)
            started = time.perf_counter()
            job = client.submit(text, model=model)
            api_times.append(time.perf_counter() - started)
            growths.append(rss_peak_mib(pid) - settled)
            stored = boto.head_object(Bucket=BUCKET, Key=f"{job.job_id}/model/model.zip")
            assert stored["ContentLength"] == size, stored

            started = time.perf_counter()
            boto.upload_file(str(model), BUCKET, f"baseline/model-{run}.zip")
            boto_times.append(time.perf_counter() - started)

        api_rate = size / MIB / statistics.median(api_times)
        boto_rate = size / MIB / statistics.median(boto_times)
        print(f"scheduler RSS at rest: {settled:.0f} MiB")
        print(
            f"submit with the model through the API: {api_rate:.0f} MiB/s (median of {args.runs}; "
            f"{', '.join(f'{t:.2f}' for t in api_times)} s)"
        )
        print(
            f"plain boto3 upload_file of the same zip: {boto_rate:.0f} MiB/s "
            f"({', '.join(f'{t:.2f}' for t in boto_times)} s)"
        )
        print(f"API / boto3 = {api_rate / boto_rate:.2f}  (target >= 0.9)")
        worst = max(growths)
        print(
            f"scheduler peak RSS growth per submit: {', '.join(f'{g:.1f}' for g in growths)} MiB "
            f"(worst {worst / (size / MIB):.3f} x the zip; target: far below 1)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
