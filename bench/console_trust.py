"""The trust panel of a job with ``--results`` result files (default 1,000), checked on the server, beside
`learnerkit job verify JOB` of the same job from the CLI, in the same run (the issue's target: the panel within
the time the CLI takes, a ratio <= 1).

A real scheduler as bench/console.py runs it (the REST API's app with the console on uvicorn, real etcd and
SeaweedFS); the job's provenance written and signed by the platform's real writer over its result files; the page
opened in real Chromium until its verdict shows. Three figures for the panel, each the median of ``--runs``:
- cold: the first check, the scheduler fetching every file once into its copy and hashing it;
- unchanged: a check with nothing changed in the store (one listing; nothing fetched or hashed again);
- one byte changed: a check after one result's byte changed (one file fetched; `verify_folder` run again).
The CLI baseline is `learnerkit job verify JOB --output json` as a user runs it (download, then verify), median
of ``--runs``.

Needs etcd, SeaweedFS (weed) and /usr/bin/chromium; no Docker images.
Usage: python bench/console_trust.py [--results 1000] [--size 4096] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import uvicorn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"

from playwright.sync_api import expect, sync_playwright  # noqa: E402
from trustjob import (  # noqa: E402
    DATA,
    JOB,
    LEARNER_ID,
    MANIFEST,
    METRICS,
    MODEL_ZIP,
    PREFIX,
    SIDECAR_ID,
    MemoryStore,
    completed_attempt,
    describe,
    sha,
)

from controller_sidecar.etcdstore import EtcdStore  # noqa: E402
from controller_sidecar.provenancerecord import RECORD_KEY, Digested, SidecarRecord  # noqa: E402
from controller_sidecar.recordchannel import RecordsRead  # noqa: E402
from learnerkit.common import engineimages  # noqa: E402
from learnerkit.common.keyring import PublishedKey  # noqa: E402
from learnerkit.common.signing import create_signer, load_public_key, public_key_path  # noqa: E402
from learnerkit.dev.etcd import EtcdServer, etcd_binary  # noqa: E402
from learnerkit.dev.s3 import SeaweedServer, create_bucket  # noqa: E402
from learnerkit.scheduler.admission.stage import Stage  # noqa: E402
from learnerkit.scheduler.api.app import create_app  # noqa: E402
from learnerkit.scheduler.api.auth import add_token  # noqa: E402
from learnerkit.scheduler.backends.docker import DockerBackend  # noqa: E402
from learnerkit.scheduler.config.policy import SubmitPolicy, origin  # noqa: E402
from learnerkit.scheduler.console.origin import own_names  # noqa: E402
from learnerkit.scheduler.console.pages import ConsoleSettings  # noqa: E402
from learnerkit.scheduler.core.options import SchedulerOptions  # noqa: E402
from learnerkit.scheduler.core.planning import Platform  # noqa: E402
from learnerkit.scheduler.core.scheduler import Scheduler  # noqa: E402
from learnerkit.scheduler.images.catalog import ImageCatalog  # noqa: E402
from learnerkit.scheduler.jobs.state import JobState, JobStatus  # noqa: E402
from learnerkit.scheduler.jobs.store import JobStore  # noqa: E402
from learnerkit.scheduler.manifest.parser import parse_manifest  # noqa: E402
from learnerkit.scheduler.provenance.facts import ImageFact  # noqa: E402
from learnerkit.scheduler.provenance.writer import FinishedJob, ProvenanceWriter  # noqa: E402

T = TypeVar("T")
TENANT = "team-a"
"""The tenant the writer's job names."""
BUCKET = "trust-bench"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def engine_images(image: str) -> ImageFact:
    """The job's images as the writer describes them, the sidecar by the ID this host's engine has under its
    reference (both checks ask the engine: a made-up ID would fail them as changed)."""
    fact = describe(image)
    if fact.digest == SIDECAR_ID:
        return ImageFact(fact.reference, engineimages.image_id(fact.reference) or fact.digest)
    return fact


def signed_job(tmp: Path, results: int, size: int) -> tuple[MemoryStore, Path]:
    """One attempt that stored ``results`` result files of ``size`` bytes, its provenance written and signed by
    the platform's real writer."""
    store = MemoryStore({f"{PREFIX}model/model.zip": MODEL_ZIP})
    key = tmp / "platform.pem"
    writer = ProvenanceWriter(create_signer(key), engine_images, "learnerkit/sidecar:0.1.0")
    learner = f"{PREFIX}attempt-1/learner-1/"
    stored = []
    for n in range(results):
        data = hashlib.sha256(str(n).encode()).digest() * (size // 32)
        store.objects[f"{learner}results/part-{n:05d}.bin"] = data
        stored.append(Digested(f"results/part-{n:05d}.bin", sha(data), len(data)))
    store.objects[learner + "logs/metrics.jsonl"] = METRICS
    record = SidecarRecord(
        1,
        tuple(Digested(f"s3://data/{k}", sha(v), len(v)) for k, v in sorted(DATA.items())),
        Digested(f"s3://results/{PREFIX}model/model.zip", sha(MODEL_ZIP), len(MODEL_ZIP)),
        (),
        tuple(stored),
        Digested("logs/metrics.jsonl", sha(METRICS), len(METRICS)),
    )
    store.objects[learner + RECORD_KEY] = record.to_json()
    store.records[(1, 1)] = record
    state = JobState(JOB, TENANT, "mnist", 0.0, status=JobStatus.COMPLETED, attempt=1)
    finished = FinishedJob(
        state,
        parse_manifest(MANIFEST),
        LEARNER_ID,
        (completed_attempt(),),
        "lk-bench",
        records=RecordsRead(dict(store.records), {}),
    )
    writer.write(store, finished)
    return store, key


def manifest_text(s3: SeaweedServer) -> str:
    return f"""\
name: mnist
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {BUCKET}}}
    training_results: {{container: {BUCKET}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


def median_ms(runs: int, call: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=int, default=1000)
    parser.add_argument("--size", type=int, default=4096, help="bytes per result file")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lk-bench-trust-") as temporary:
        tmp = Path(temporary)
        etcd_server = EtcdServer(etcd_binary(), tmp / "etcd")
        s3 = SeaweedServer(tmp / "seaweed")
        etcd_server.start()
        s3.start()
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        try:
            bench(args, tmp, etcd_server, s3, loop)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            s3.stop()
            etcd_server.stop()
    return 0


def bench(
    args: argparse.Namespace, tmp: Path, etcd_server: EtcdServer, s3: SeaweedServer, loop: asyncio.AbstractEventLoop
) -> None:
    def run(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(3600)

    objects, key = signed_job(tmp, args.results, args.size)
    client = s3.client()
    create_bucket(client, BUCKET)
    for name, data in objects.objects.items():
        client.put_object(Bucket=BUCKET, Key=name, Body=data)
    print(f"job {JOB}: {args.results} result files of {args.size} B, {len(objects.objects)} objects stored")
    tokens = tmp / "tokens.json"
    token = add_token(tokens, TENANT)
    text = manifest_text(s3)
    etcd = run(EtcdStore.connect(etcd_server.settings()))
    store = JobStore(etcd, "/learnerkit-bench-trust/jobs")
    spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": TENANT, "job_id": JOB}
    state = JobState(JOB, TENANT, "mnist", 1_800_000_000.0)
    run(store.create(state, spec, text, "manifest.yml"))
    # HALTED: a job that can resume keeps its store's credentials, so the scheduler reads its files.
    run(store.save(state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user")))
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3.endpoint_url)),)),
    )
    scheduler = Scheduler(store, DockerBackend(), options)
    run(scheduler.loop.rebuild())
    published = [PublishedKey(load_public_key(public_key_path(key)).keyid, public_key_path(key).read_text(), True)]
    settings = ConsoleSettings(own_names("127.0.0.1"), trust_recheck_s=0.0)  # every request checks again
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(scheduler, tokens, keys=published, console=settings)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        figures(args, url, token, client)
    finally:
        server.should_exit = True
        serving.result(60)
        run(etcd.close())


def figures(args: argparse.Namespace, url: str, token: str, client: Any) -> None:
    env = os.environ | {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": token}
    cli = [str(Path(sys.executable).parent / "learnerkit"), "job", "verify", JOB, "--output", "json"]

    def verify() -> None:
        done = subprocess.run(cli, env=env, capture_output=True, text=True, check=False)
        if '"verified": true' not in done.stdout:
            raise SystemExit(f"job verify did not verify the job: {done.stdout[-2000:]} {done.stderr[-2000:]}")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(service_workers="block")
        context.route("**/*", lambda r: r.continue_() if "//127.0.0.1:" in r.request.url else r.abort())
        page = context.new_page()
        page.goto(f"{url}/ui/login?next=/ui/jobs")
        page.get_by_label("Tenant token").fill(token)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_load_state()

        def panel(expected: str) -> Callable[[], None]:
            def opened() -> None:
                page.goto(f"{url}/ui/jobs/{JOB}/trust", timeout=600_000)
                expect(page.locator("[data-trust=verdict]")).to_contain_text(expected, timeout=120_000)

            return opened

        cold = median_ms(1, panel("Verified"))
        unchanged = median_ms(args.runs, panel("Verified"))
        key = f"{PREFIX}attempt-1/learner-1/results/part-00000.bin"
        original = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        changed_times = []
        for n in range(args.runs):
            client.put_object(Bucket=BUCKET, Key=key, Body=bytes([original[0] ^ (n + 1)]) + original[1:])
            changed_times.append(median_ms(1, panel("Not verified: 1 changed")))
        client.put_object(Bucket=BUCKET, Key=key, Body=original)
        panel("Verified")()
        browser.close()
    baseline = median_ms(args.runs, verify)
    print(f"{'case':<52} {'ms':>9}  ratio to `job verify` ({baseline:.0f} ms)")
    for name, figure in (
        ("panel, cold (every file fetched and hashed)", cold),
        ("panel, nothing changed (one listing)", unchanged),
        ("panel, one byte of one result changed", statistics.median(changed_times)),
        ("CLI: learnerkit job verify JOB (baseline)", baseline),
    ):
        print(f"{name:<52} {figure:>9.0f}  x{figure / baseline:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
