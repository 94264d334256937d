"""The console in real Chromium against a real scheduler: the REST API's app with the console on uvicorn over a real
`Scheduler` restored from jobs written to the real etcd as JobStore writes them, a log in the real SeaweedFS, the
event hub following etcd (as tests/integration/console does). Each case prints its figures beside their targets
and a baseline measured in the same run (a plain REST call), as a ratio.

Cases (``--cases``; another adds itself to `CASES`):
- ``live``: a job's status written to etcd (``--changes`` times) until the open job page shows it: p50/p95 ms
  (target p95 <= 1000); baseline: ``GET /v1/jobs/{id}``.
- ``list``: a tenant with ``--jobs`` jobs: the list's first page navigated to and drawn (its rows visible), p50 ms
  (target <= 1500); every page of 200 walked, the largest response (target <= 256 KiB); baseline ``GET /v1/jobs``.
- ``log``: a ``--log-mib`` log: the page of its last 64 KiB (>= 1,000 lines) drawn, ms (target <= 1000), lines
  shown, JS heap after (target < 150 MB); baseline ``GET /v1/jobs/{id}/logs?tail=1000``.
- ``sweeps``: a sweep page of ``--trials`` x ``--parameters``: its parallel coordinates drawn (target <= 1 s) and
  a brush until the rung table is laid out again (target <= 100 ms) (`bench/console_sweeps.py`).
- ``script``: the script shipped (live.js) and its gzip size.
- ``compare``: the Compare page of ``--compare-runs`` runs x 3 metrics x ``--compare-steps`` steps, its charts
  drawn (target <= 2000 ms; `bench/console_compare.py`); baseline: one run's job page, its charts drawn.
- ``series``: a ``--points`` metric history drawn on the job page: the first time ever (parsed), the first time
  after the job ended (its columns built at its end, then a cold view; target <= 500 ms), ``--runs`` times
  cold (a scheduler's series cache just started: the columns kept on disk; target <= 500 ms) and warm, a few
  thousand points sent; and the history's reading on the server, whole and grown (`bench/console_series.py`).

Needs etcd, SeaweedFS (weed) and /usr/bin/chromium; no Docker images.
Usage: python bench/console.py [--cases live,list,log,script,series,compare,sweeps] [--jobs N] [--log-mib N]
       [--changes N] [--points N] [--runs N] [--compare-runs N] [--compare-steps N] [--trials N] [--parameters N]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
import uvicorn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from controller_sidecar import keys  # noqa: E402
from controller_sidecar.etcdstore import EtcdStore  # noqa: E402
from controller_sidecar.logship import part_name  # noqa: E402
from learnerkit.dev.etcd import EtcdServer, etcd_binary  # noqa: E402
from learnerkit.dev.s3 import SeaweedServer, create_bucket  # noqa: E402
from learnerkit.scheduler.admission.stage import Stage  # noqa: E402
from learnerkit.scheduler.api.app import create_app  # noqa: E402
from learnerkit.scheduler.api.auth import add_token  # noqa: E402
from learnerkit.scheduler.backends.docker import DockerBackend  # noqa: E402
from learnerkit.scheduler.config.policy import SubmitPolicy, origin  # noqa: E402
from learnerkit.scheduler.core.options import SchedulerOptions  # noqa: E402
from learnerkit.scheduler.core.planning import Platform  # noqa: E402
from learnerkit.scheduler.core.scheduler import Scheduler  # noqa: E402
from learnerkit.scheduler.events.hub import EventHub  # noqa: E402
from learnerkit.scheduler.events.source import follow_etcd  # noqa: E402
from learnerkit.scheduler.images.catalog import ImageCatalog  # noqa: E402
from learnerkit.scheduler.jobs.attempts import Attempt, save_attempt  # noqa: E402
from learnerkit.scheduler.jobs.state import JobState, JobStatus  # noqa: E402
from learnerkit.scheduler.jobs.store import JobStore  # noqa: E402
from learnerkit.scheduler.manifest.parser import parse_manifest  # noqa: E402
from learnerkit.scheduler.series.cache import SeriesCache  # noqa: E402

T = TypeVar("T")
TENANT = "bench"
BUCKET = "console-bench"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TARGET_BYTES = 256 * 1024
LOG_PART_BYTES = 16 * 1024 * 1024


@dataclass
class Bench:
    url: str
    token: str
    root: str
    log_job: str
    """A HALTED job with the big log (attempt 1, learner 1)."""
    run: Callable[[Coroutine[Any, Any, Any]], Any]
    etcd: EtcdStore
    s3: SeaweedServer
    browser: Browser
    args: argparse.Namespace
    compare_jobs: list[str]
    """The compare case's runs (none unless it is chosen)."""
    restart_series: Callable[[], None]
    """The app's series cache replaced by a new one over the same folder: as a scheduler just started has it."""
    end_series_job: Callable[[], float]
    """The columns kept of ``log_job`` forgotten, then its end written to etcd again: seconds until the scheduler
    has built them (`SeriesPrebuild`)."""

    def page(self, path: str) -> Page:
        """A logged-in page at ``path``; every request must stay on 127.0.0.1."""
        context = self.browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
        context.route("**/*", lambda r: r.continue_() if "//127.0.0.1:" in r.request.url else r.abort())
        page = context.new_page()
        page.goto(f"{self.url}/ui/login?next={path}")
        page.get_by_label("Tenant token").fill(self.token)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_load_state()
        return page

    def rest(self, path: str) -> requests.Response:
        answer = requests.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        answer.raise_for_status()
        return answer


def report(name: str, figure: float, unit: str, target: str, baseline: float | None = None) -> None:
    ratio = f"  x{figure / baseline:.1f} the baseline ({baseline:.1f} {unit})" if baseline else ""
    print(f"  {name:<44} {figure:>10.1f} {unit:<3} target {target}{ratio}", flush=True)


def timed_ms(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else values[0]


def case_live(bench: Bench) -> None:
    job_id = bench.log_job
    page = bench.page(f"/ui/jobs/{job_id}")
    baseline = [timed_ms(lambda: bench.rest(f"/v1/jobs/{job_id}")) for _ in range(bench.args.changes)]
    shown = []
    for n in range(bench.args.changes):
        state = JobState(job_id, TENANT, "log", time.time()).evolve(status=JobStatus.HALTED, reason=f"live-{n}")
        value = json.dumps(state.to_raw(), sort_keys=True)
        started = time.perf_counter()
        bench.run(bench.etcd.put(keys.job_status_key(job_id, bench.root), value))
        expect(page.locator("p[data-live=reason]")).to_have_text(f"Ended: live-{n}", timeout=10_000)
        shown.append((time.perf_counter() - started) * 1000)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1, "the page was never reloaded"
    report("change in etcd -> shown, p50", statistics.median(shown), "ms", "-", statistics.median(baseline))
    report("change in etcd -> shown, p95", p95(shown), "ms", "p95 <= 1000", statistics.median(baseline))
    page.context.close()


def case_list(bench: Bench) -> None:
    baseline = statistics.median(timed_ms(lambda: bench.rest("/v1/jobs")) for _ in range(10))
    page = bench.page("/ui/jobs")
    drawn = []
    for _ in range(10):
        started = time.perf_counter()
        page.goto(f"{bench.url}/ui/jobs")
        page.locator("table.jobs tbody tr").first.wait_for()
        drawn.append((time.perf_counter() - started) * 1000)
    total = page.locator("[data-live=count]").inner_text()
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    page.context.close()
    largest, pages, link = 0, 0, "/ui/jobs?limit=200"
    while link:
        answer = requests.get(bench.url + link, cookies=cookies, timeout=60)
        answer.raise_for_status()
        largest, pages = max(largest, len(answer.content)), pages + 1
        marker = answer.text.find('rel="next"')
        link = answer.text[:marker].rsplit('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&") if marker > 0 else ""
    print(f"  ({total}; {pages} pages of 200 walked)")
    report("first page navigated and drawn, p50", statistics.median(drawn), "ms", "<= 1500", baseline)
    report("largest page response", largest / 1024, "KiB", f"<= {PAGE_TARGET_BYTES // 1024}")


def case_log(bench: Bench) -> None:
    job_id = bench.log_job
    answer = bench.rest(f"/v1/jobs/{job_id}/logs?tail=1000&attempt=1")
    size = int(answer.headers["X-Log-Size"])
    baseline = statistics.median(
        timed_ms(lambda: bench.rest(f"/v1/jobs/{job_id}/logs?tail=1000&attempt=1")) for _ in range(5)
    )
    page = bench.page(f"/ui/jobs/{job_id}")
    session = page.context.new_cdp_session(page)
    drawn, lines = [], 0
    for _ in range(5):
        started = time.perf_counter()
        page.goto(f"{bench.url}/ui/jobs/{job_id}/log?attempt=1&end={size}")
        page.locator("pre").first.wait_for()
        drawn.append((time.perf_counter() - started) * 1000)
        lines = int(page.evaluate("document.querySelector('pre').textContent.split('\\n').length - 1"))
    heap = session.send("Runtime.getHeapUsage")["usedSize"] / 1e6
    print(f"  (a log of {size / 2**20:.0f} MiB; {lines} lines shown)")
    report("its last 64 KiB drawn, p50", statistics.median(drawn), "ms", "<= 1000", baseline)
    report("JS heap after", heap, "MB", "< 150")
    page.context.close()


def case_script(_bench: Bench) -> None:
    for script in sorted((REPO / "learnerkit/scheduler/console/static").glob("*.js")):
        data = script.read_bytes()
        packed = len(gzip.compress(data, 9))
        report(f"{script.name}, gzip -9 (raw {len(data)} B)", packed / 1024, "KiB", "a few hundred KiB at most")


def case_series(bench: Bench) -> None:
    from console_series import parse_case, series_case, write_history  # numpy, the series room: this case only

    write_history(bench.s3.client(), BUCKET, bench.log_job, bench.args.points)
    page = bench.page("/ui/jobs")
    figures = series_case(
        page, bench.url, bench.log_job, bench.args.points, bench.args.runs, bench.restart_series, bench.end_series_job
    )
    for line in figures.lines():
        print(f"  {line}", flush=True)
    page.context.close()
    for line in parse_case(bench.args.points):
        print(f"  {line}", flush=True)


def case_compare(bench: Bench) -> None:
    from console_compare import compare_case

    page = bench.page("/ui/jobs")
    for line in compare_case(page, bench.url, bench.compare_jobs, bench.args.compare_steps, bench.args.runs):
        print(f"  {line}", flush=True)
    page.context.close()


def case_sweeps(bench: Bench) -> None:
    from console_sweeps import sweeps_case

    page = bench.page("/ui/jobs")
    for line in sweeps_case(page, bench.url, bench.args.trials, bench.args.parameters, bench.args.runs):
        print(f"  {line}", flush=True)
    page.context.close()


CASES: dict[str, Callable[[Bench], None]] = {
    "live": case_live,
    "list": case_list,
    "log": case_log,
    "script": case_script,
    "series": case_series,
    "compare": case_compare,
    "sweeps": case_sweeps,
}


def manifest(s3: SeaweedServer, name: str) -> str:
    return f"""\
name: {name}
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
  command: "true"
"""


async def write_jobs(store: JobStore, s3: SeaweedServer, count: int) -> str:
    """``count`` queued or halted jobs, and the HALTED job that has the big log."""
    text = manifest(s3, "list-bench")
    spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": TENANT}
    now = time.time()

    async def one(i: int) -> None:
        job_id = f"job-{i:012d}"
        state = JobState(job_id, TENANT, ("mnist", "resnet-50", "bert")[i % 3], now - 100_000 + i * 7)
        await store.create(state, {**spec, "job_id": job_id}, text, "manifest.yml")
        if i % 4 == 0:
            await store.save(state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user"))
        else:
            await store.save(state.evolve(not_before=now + 36_000, reason="backing off"))

    for start in range(0, count, 100):
        await asyncio.gather(*(one(i) for i in range(start, min(start + 100, count))))
    log_job = f"job-log-{uuid.uuid4().hex[:8]}"
    state = JobState(log_job, TENANT, "log", now)
    await store.create(state, {**spec, "job_id": log_job}, text, "manifest.yml")
    await save_attempt(store, log_job, Attempt(1, ("node-1",), "2027-01-15T09:00:00+00:00"))
    await store.save(state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user"))
    return log_job


def upload_log(s3: SeaweedServer, job_id: str, mib: int) -> None:
    client = s3.client()
    line_no = 0
    for n in range(1, max(1, mib * 2**20 // LOG_PART_BYTES) + 1):
        lines = []
        size = 0
        while size < min(LOG_PART_BYTES, mib * 2**20):
            line_no += 1
            line = f"step {line_no} loss {1 / line_no:.6f} lr 0.001 epoch {line_no // 10000}\n"
            lines.append(line)
            size += len(line)
        client.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-1/learner-1/logs/{part_name(n)}", Body="".join(lines))


@contextmanager
def served(args: argparse.Namespace, tmp: Path) -> Iterator[Bench]:
    etcd_server = EtcdServer(etcd_binary(), tmp / "etcd")
    s3 = SeaweedServer(tmp / "seaweed")
    etcd_server.start()
    s3.start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(3600)

    try:
        create_bucket(s3.client(), BUCKET)
        tokens = tmp / "tokens.json"
        token = add_token(tokens, TENANT)
        root = "/learnerkit-bench/jobs"
        etcd = run(EtcdStore.connect(etcd_server.settings()))
        store = JobStore(etcd, root)
        started = time.perf_counter()
        log_job = run(write_jobs(store, s3, args.jobs))
        upload_log(s3, log_job, args.log_mib)
        compare_jobs: list[str] = []
        if "compare" in args.cases:
            from console_compare import write_runs

            text = manifest(s3, "compare-bench")
            compare_jobs = run(write_runs(store, s3, BUCKET, text, TENANT, args.compare_runs, args.compare_steps))
        print(f"wrote {args.jobs} jobs and a {args.log_mib} MiB log in {time.perf_counter() - started:.0f} s")
        options = SchedulerOptions(
            platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
            catalog=ImageCatalog(REPO).frameworks(),
            resolve_image=lambda _manifest: "unused",
            submit_policy=SubmitPolicy(object_stores=(str(origin(s3.endpoint_url)),)),
        )
        scheduler = Scheduler(store, DockerBackend(), options)
        run(scheduler.loop.rebuild())
        hub = EventHub(root, streams_per_address=8)
        following = asyncio.run_coroutine_threadsafe(follow_etcd(hub, etcd), loop)
        while not hub.ready.is_set():
            time.sleep(0.05)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        app = create_app(scheduler, tokens, events=hub, series_folder=tmp / "series")

        def restart_series() -> None:
            app.state.series = app.state.series_prebuild.cache = SeriesCache(scheduler, folder=tmp / "series")

        def end_series_job() -> float:
            for kept in (tmp / "series").glob("*.series"):
                kept.unlink()
            restart_series()
            state = scheduler.shared.jobs[log_job].state
            started = time.perf_counter()
            run(store.save(state.evolve(reason=f"halted by its user at {started}")))  # an event: HALTED
            while not any((tmp / "series").glob("*.series")):
                if time.perf_counter() - started > 3600:
                    raise TimeoutError("the ended job's series columns were not built within an hour")
                time.sleep(0.05)
            run(app.state.series_prebuild.drain())
            return time.perf_counter() - started

        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
        while not server.started:
            time.sleep(0.05)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS
                )
                url = f"http://127.0.0.1:{sock.getsockname()[1]}"
                yield Bench(
                    url,
                    token,
                    root,
                    log_job,
                    run,
                    etcd,
                    s3,
                    browser,
                    args,
                    compare_jobs,
                    restart_series,
                    end_series_job,
                )
                browser.close()
        finally:
            server.should_exit = True
            serving.result(60)
            following.cancel()
            run(etcd.close())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        s3.stop()
        etcd_server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--log-mib", type=int, default=1024)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--points", type=int, default=1_000_000, help="the series case's history, in records")
    parser.add_argument("--runs", type=int, default=5, help="the series and compare cases' warm page openings")
    parser.add_argument("--compare-runs", type=int, default=50, help="the compare case's jobs")
    parser.add_argument("--compare-steps", type=int, default=10_000, help="the compare case's steps per metric")
    parser.add_argument("--trials", type=int, default=1_000, help="the sweeps case's trials")
    parser.add_argument("--parameters", type=int, default=20, help="the sweeps case's parameters")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in CASES]
    if unknown:
        parser.error(f"--cases: no case {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    with tempfile.TemporaryDirectory(prefix="lk-bench-console-") as tmp, served(args, Path(tmp)) as bench:
        for name in chosen:
            print(f"[{name}]", flush=True)
            CASES[name](bench)
    return 0


if __name__ == "__main__":
    sys.exit(main())
