"""What the provenance record costs a job's end, and what `job verify` costs beside a plain download, in one run.

A job of ``--files`` result files of ``--kib`` KiB each, against a SeaweedFS and an etcd of the benchmark's own
(loopback). Each run:

- **upload**: the results uploaded by the sidecar's own store (`S3Store.upload_stream`, 8 at a time as the
  sidecar's default concurrency), the baseline;
- **record**: what the platform adds to the job's end for its provenance: the sidecar's record put in etcd
  (`put_record`, in parts under a head) and its copy in the bucket. Target: record / upload <= 0.05;
- **download**: the results fetched back (8 at a time), the baseline of a verify;
- **verify**: `verify_folder` of the downloaded folder against the statement the scheduler's writer signed from
  the etcd records (every result hashed again, the factsheet rendered again).

Prints the medians of ``--runs`` runs and the ratios. Exits 1 when the record's ratio is over the target.
Usage: python bench/provenance_record.py [--files 1000] [--kib 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.provenancerecord import RECORD_KEY, Digested, SidecarRecord
from controller_sidecar.recordchannel import assemble, put_record
from controller_sidecar.s3store import S3Store
from learnerkit.common.signing import create_signer, load_public_key, public_key_path
from learnerkit.dev.etcd import EtcdServer, etcd_binary
from learnerkit.dev.s3 import SeaweedServer, create_bucket
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.verify import verify_folder
from learnerkit.scheduler.provenance.writer import FinishedJob, ProvenanceWriter

BUCKET = "bench-record"
TARGET = 0.05
WORKERS = 8
MANIFEST = """\
name: bench
version: "1.0"
cpus: 1
gpus: 0
memory: 1Gb
learners: 1
data_stores:
  - id: store
    type: s3_datastore
    training_data: {{container: {bucket}/data}}
    training_results: {{container: {bucket}}}
    connection: {{auth_url: "{url}", user_name: "{key}", password: "{secret}"}}
framework: {{name: pytorch, version: "2.13", command: python3 train.py}}
"""


def one_run(
    store: S3Store,
    etcd: EtcdStore,
    loop: asyncio.AbstractEventLoop,
    run: int,
    args: argparse.Namespace,
    manifest_text: str,
    scratch: Path,
) -> dict[str, float]:
    job_id = f"bench-{run}"
    learner = f"{job_id}/attempt-1/learner-1/"
    payloads = {f"results/shard-{n:05d}.bin": os.urandom(args.kib * 1024) for n in range(args.files)}
    pool = ThreadPoolExecutor(WORKERS)

    started = time.perf_counter()
    stored = list(
        pool.map(
            lambda item: store.upload_stream(io.BytesIO(item[1]), BUCKET, learner + item[0], source=item[0]),
            payloads.items(),
        )
    )
    upload = time.perf_counter() - started

    record = SidecarRecord(1, results=tuple(Digested(o.key.removeprefix(learner), o.sha256, o.size) for o in stored))
    started = time.perf_counter()
    asyncio.run_coroutine_threadsafe(put_record(etcd, job_id, 1, record, keys.ROOT), loop).result()
    store.put_bytes(BUCKET, learner + RECORD_KEY, record.to_json())
    recorded = time.perf_counter() - started

    found = asyncio.run_coroutine_threadsafe(etcd.get_prefix(keys.provenance_prefix(job_id)), loop).result()
    key = scratch / f"platform-{run}.pem"
    writer = ProvenanceWriter(create_signer(key), lambda image: ImageFact(image, ""), "learnerkit/sidecar:bench")
    attempt = Attempt(1, ("node",), "2026-01-01T00:00:00Z").ended(AttemptEnd.COMPLETED, "", "2026-01-01T01:00:00Z")
    state = JobState(job_id, "bench", "bench", 0.0, status=JobStatus.COMPLETED)
    job = FinishedJob(
        state, parse_manifest(manifest_text), "img", (attempt,), "bench", records=assemble(found, job_id, keys.ROOT)
    )
    started = time.perf_counter()
    written = writer.write(store, job)
    signing = time.perf_counter() - started

    folder = scratch / f"download-{run}"

    def fetch(key: str) -> None:
        path = folder / key.removeprefix(f"{job_id}/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get_bytes(BUCKET, key))

    started = time.perf_counter()
    list(pool.map(fetch, [o.key for o in stored]))
    download = time.perf_counter() - started
    for document in written:
        fetch(document)

    started = time.perf_counter()
    report = verify_folder(folder, load_public_key(public_key_path(key)))
    verify = time.perf_counter() - started
    if not report.ok:
        raise SystemExit(f"run {run}: the job does not verify: {report.to_dict()['changed']}")
    pool.shutdown()
    return {"upload": upload, "record": recorded, "sign": signing, "download": download, "verify": verify}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--kib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-record-") as temporary:
        scratch = Path(temporary)
        s3, etcd_server = SeaweedServer(scratch / "s3"), EtcdServer(etcd_binary(), scratch / "etcd")
        loop = asyncio.new_event_loop()
        runner = ThreadPoolExecutor(1)
        runner.submit(loop.run_forever)
        try:
            s3.start()
            etcd_server.start()
            create_bucket(s3.client(), BUCKET)
            store = S3Store(s3.settings())
            etcd = asyncio.run_coroutine_threadsafe(EtcdStore.connect(etcd_server.settings()), loop).result()
            text = MANIFEST.format(bucket=BUCKET, url=s3.endpoint_url, key=s3.access_key, secret=s3.secret_key)
            runs = [one_run(store, etcd, loop, run, args, text, scratch) for run in range(args.runs)]
            asyncio.run_coroutine_threadsafe(etcd.close(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            runner.shutdown()
            etcd_server.stop()
            s3.stop()
    median = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    print(f"{args.files} result files of {args.kib} KiB, {args.runs} runs, medians:")
    for name, seconds in median.items():
        print(f"  {name:9} {seconds:8.3f} s")
    ratio = median["record"] / median["upload"]
    print(f"record / upload   {ratio:.4f} (target <= {TARGET})")
    print(f"sign (scheduler, off the job's path) / upload {median['sign'] / median['upload']:.4f}")
    print(f"verify / download {median['verify'] / median['download']:.3f}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
