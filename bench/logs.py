"""`job logs` at scale: a 100 MB learner log read through the real API, the scheduler in a process of its own.

It starts etcd and SeaweedFS on loopback and the scheduler's API (the real Scheduler and FastAPI app, under
uvicorn) in a child process, submits a job, and writes a 100 MB log for it as the sidecar ships one (8 MiB
parts, ``learner.log.part-NNNNNN``). Then, through the API:

- 4 reads of the last 100 lines (``--tail 100``) and 1 read of the whole log;
- the scheduler process's peak RSS growth in each phase (its ``VmHWM``, reset before each), against the
  log's size: it must not grow with the log (the rebuilt-log way took 811 MiB for the four tail reads);
- the whole read's throughput, against a plain boto3 read of the same objects measured in the same run.

No Docker: the scheduler's backend has no nodes, so the job ends FAILED (unschedulable) once recorded; its log is
read all the same.
Usage: python bench/logs.py [--mb 100]
"""

from __future__ import annotations

import argparse
import time

from serving import reset_peak, rss_now_mib, rss_peak_mib, scheduler_without_nodes

PART = 8 << 20
BUCKET = "bench-logs"
MIB = 1 << 20


def write_log(client: object, prefix: str, total: int) -> int:
    """``total`` bytes of numbered lines as 8 MiB parts; returns the number of parts."""
    line = b"step %09d loss 0.123456 accuracy 0.987654 lr 0.001 some more words to fill the line\n"
    per_part = PART // len(line % 0)
    parts, written, step = 0, 0, 0
    while written < total:
        count = min(per_part, (total - written) // len(line % 0) + 1)
        data = b"".join(line % (step + i) for i in range(count))
        step += count
        parts += 1
        client.put_object(Bucket=BUCKET, Key=f"{prefix}learner.log.part-{parts:06d}", Body=data)  # type: ignore[attr-defined]
        written += len(data)
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=100, help="the log's size in MB")
    args = parser.parse_args()

    with scheduler_without_nodes(BUCKET, "lk-bench-logs-") as served:
        boto, client, child = served.boto, served.client, served.child
        job = served.first_submit(served.manifest("logs-bench"))
        prefix = f"{job.job_id}/attempt-1/learner-1/logs/"
        parts = write_log(boto, prefix, args.mb * 1_000_000)
        size = sum(o["Size"] for o in boto.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"])
        print(f"log: {size / MIB:.1f} MiB in {parts} parts of <= 8 MiB")

        client.logs(job.job_id, tail=1)  # warm up: the S3 client and the code paths
        pid = child.pid
        settled = rss_now_mib(pid)
        reset_peak(pid)
        for _ in range(4):
            tail = client.logs(job.job_id, tail=100)
            assert tail.data.count(b"\n") == 100 and tail.next_offset == size, (len(tail.data), tail.next_offset)
        tail_growth = rss_peak_mib(pid) - settled

        counted = [0]

        def sink(chunk: bytes) -> None:
            counted[0] += len(chunk)

        settled = rss_now_mib(pid)
        reset_peak(pid)
        started = time.perf_counter()
        next_offset, _ = client.copy_logs(job.job_id, sink)
        api_s = time.perf_counter() - started
        full_growth = rss_peak_mib(pid) - settled
        assert counted[0] == size == next_offset, (counted[0], size, next_offset)

        started = time.perf_counter()
        plain = 0
        for n in range(1, parts + 1):
            body = boto.get_object(Bucket=BUCKET, Key=f"{prefix}learner.log.part-{n:06d}")["Body"]
            while chunk := body.read(MIB):
                plain += len(chunk)
        boto_s = time.perf_counter() - started
        assert plain == size

        print(f"scheduler RSS at rest: {settled:.0f} MiB")
        print(f"4 x --tail 100:  peak RSS growth {tail_growth:6.1f} MiB  ({tail_growth / (size / MIB):.3f} x the log)")
        print(f"1 x whole log:   peak RSS growth {full_growth:6.1f} MiB  ({full_growth / (size / MIB):.3f} x the log)")
        api_rate, boto_rate = size / MIB / api_s, size / MIB / boto_s
        print(
            f"whole log through the API: {api_rate:.0f} MiB/s; plain boto3 read of the same parts: "
            f"{boto_rate:.0f} MiB/s  (API / boto3 = {api_rate / boto_rate:.2f})"
        )
        print("target: RSS growth independent of the log's size (before: 811 MiB for 4 tail reads of 100 MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
