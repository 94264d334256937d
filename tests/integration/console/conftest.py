"""The console against a real scheduler: the REST API's app (uvicorn on 127.0.0.1) over a real Scheduler restored
from jobs written to the real etcd as JobStore writes them, their logs and files in the real SeaweedFS; pages
driven in Debian's chromium by Playwright. Nothing is deployed."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import uvicorn

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.logship import part_name
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.events.source import follow_etcd
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, save_attempt
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.conftest import REPO
from tests.integration.scheduler.conftest import Harness
from tests.waiting import wait_until

# Playwright must never fetch a browser of its own: the tests drive Debian's chromium.
os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
from playwright.sync_api import Browser, BrowserContext, Page, Route, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BUCKET = "console-tests"
JOBS_A = 30
FIRST_LOG = [
    b"".join(b"step %d loss 0.%03d\n" % (n, 999 - n) for n in range(1, 4001)),
    b"preempted: checkpoint at step 4000\n",
]
SECOND_LOG = [b"restored step 4000\nstep 4001 loss 0.101\ntraining done\n"]
RESULT = b"accuracy 0.97\n"
METRIC_STEPS = 20_000
"""The featured job's metric history: attempt 1's steps, then attempt 2's from its checkpoint (test_charts.py)."""
METRICS = [
    b"".join(
        b'{"step": %d, "time": %d, "values": {"loss": %.6f}}\n' % (s, 1_800_000_000 + s, 2 / (s + 1))
        for s in range(1, 12_001)
    ),
    b"".join(
        b'{"step": %d, "time": %d, "values": {"loss": %.6f}}\n' % (s, 1_800_100_000 + s, 2 / (s + 1))
        for s in range(12_001, METRIC_STEPS + 1)
    ),
]


@dataclass(frozen=True)
class Console:
    url: str
    token: str
    """team-a's."""
    other_token: str
    """team-b's."""
    tokens: Path
    job_id: str
    """team-a's preempted-then-halted job, with logs and a stored file."""
    other_job_id: str
    """A job of team-b."""
    root: str
    """The jobs' root in etcd."""
    put: Callable[[str, str], None]
    """Writes one key to the real etcd (as the scheduler or a sidecar would)."""


def _manifest(s3: Any, name: str) -> str:
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
  command: python train.py --epochs 3
"""


async def _write(store: JobStore, s3: Any) -> tuple[str, str]:
    """team-a's jobs in several states, one of them preempted then halted; one job of team-b."""
    names = ("mnist", "resnet-50", "bert-finetune")
    for n in range(JOBS_A):
        text = _manifest(s3, names[n % 3])
        await _create(store, text, "team-a", 1_800_000_000.0 + n * 60, n)
    featured = _manifest(s3, "mnist-preempted")
    job_id = await _create(store, featured, "team-a", 1_800_000_000.0 + JOBS_A * 60, -1)
    other = await _create(store, _manifest(s3, "secret-of-b"), "team-b", 1_800_000_000.0, 1)
    return job_id, other


async def _create(store: JobStore, text: str, tenant: str, submitted: float, n: int) -> str:
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    spec: dict[str, Any] = {
        "manifest": parse_manifest(text, "manifest.yml", None).to_dict(),
        "tenant": tenant,
        "job_id": job_id,
    }
    state = JobState(job_id, tenant, spec["manifest"]["name"], submitted)
    await store.create(state, spec, text, "manifest.yml")
    if n == -1:
        await save_attempt(
            store,
            job_id,
            Attempt(1, ("node-1",), "2027-01-15T09:00:00+00:00").ended(
                AttemptEnd.PREEMPTED, "preempted by job job-urgent", "2027-01-15T09:20:00+00:00", steps_lost=12
            ),
        )
        second = Attempt(2, ("node-2",), "2027-01-15T09:25:00+00:00", resumed_from=1)
        await save_attempt(
            store, job_id, second.ended(AttemptEnd.HALTED, "halted by its user", "2027-01-15T09:40:00+00:00")
        )
        # HALTED, not COMPLETED: a job that can resume keeps its store's credentials over the restart, so the
        # scheduler reads its log and files.
        state = state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, attempt=2, reason="halted by its user")
    elif n % 3 == 0:
        state = state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, reason="halted by its user")
    else:
        state = state.evolve(not_before=4e9, reason="waiting for 1 GPU(s): 0 free")  # stays queued
    await store.save(state)
    return job_id


Seed = Callable[[EtcdStore, JobStore], Awaitable[None]]
"""A test module's own records (jobs, sweeps), written to the real etcd before the scheduler restores them."""


@pytest.fixture(scope="module")
def seed() -> Seed | None:
    """None; a module that needs records of its own overrides this fixture."""
    return None


@pytest.fixture(scope="module")
def console(
    etcd_server: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory, seed: Seed | None
) -> Iterator[Console]:
    folder = tmp_path_factory.mktemp("console")
    tokens = folder / "tokens.json"
    token, other_token = add_token(tokens, "team-a"), add_token(tokens, "team-b")
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    s3 = s3_server.client()
    create_bucket(s3, BUCKET)
    root = f"/learnerkit-console-{uuid.uuid4().hex[:8]}/jobs"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    events = EventHub(root, streams_per_address=8)

    async def start() -> tuple[EtcdStore, Scheduler, str, str, asyncio.Task[None]]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        job_id, other = await _write(store, s3_server)
        if seed is not None:
            await seed(etcd, store)
        scheduler = Scheduler(store, DockerBackend(), options)
        await scheduler.loop.rebuild()
        following = asyncio.create_task(follow_etcd(events, etcd))
        await asyncio.wait_for(events.ready.wait(), 30)
        return etcd, scheduler, job_id, other, following

    etcd, scheduler, job_id, other, following = asyncio.run_coroutine_threadsafe(start(), loop).result(120)

    def put(key: str, value: str) -> None:
        asyncio.run_coroutine_threadsafe(etcd.put(key, value), loop).result(30)

    for attempt, parts in ((1, FIRST_LOG), (2, SECOND_LOG)):
        for n, data in enumerate(parts, start=1):
            s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-{attempt}/learner-1/logs/{part_name(n)}", Body=data)
    s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-2/learner-1/results/scores.txt", Body=RESULT)
    for attempt, history in enumerate(METRICS, start=1):
        s3.put_object(Bucket=BUCKET, Key=f"{job_id}/attempt-{attempt}/learner-1/logs/metrics.jsonl", Body=history)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(scheduler, tokens, events=events), log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        yield Console(url, token, other_token, tokens, job_id, other, root, put)
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        loop.call_soon_threadsafe(following.cancel)
        sock.close()
        asyncio.run_coroutine_threadsafe(etcd.delete_prefix(root.rsplit("/", 1)[0] + "/"), loop).result(30)
        asyncio.run_coroutine_threadsafe(etcd.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class Pages:
    """Opens browser contexts whose every request must stay on 127.0.0.1: one that leaves is aborted and fails
    the test. Screenshots go to the test's tmp folder."""

    def __init__(self, browser: Browser, folder: Path) -> None:
        self.browser = browser
        self.folder = folder
        self.left: list[str] = []
        self.contexts: list[BrowserContext] = []

    def open(
        self, *, width: int = 1280, javascript: bool = True, dark: bool = False, timezone: str | None = None
    ) -> Page:
        """``timezone``: the browser's (an IANA name); None: the machine's."""
        context = self.browser.new_context(
            viewport={"width": width, "height": 900},
            java_script_enabled=javascript,
            service_workers="block",
            color_scheme="dark" if dark else "light",
            timezone_id=timezone,
        )
        context.route("**/*", self._stay_local)
        self.contexts.append(context)
        return context.new_page()

    def _stay_local(self, route: Route) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.left.append(route.request.url)
            route.abort()

    def shot(self, page: Page, name: str, *, full_page: bool = True) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=path, full_page=full_page)
        return path

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def pages(browser: Browser, tmp_path: Path) -> Iterator[Pages]:
    opened = Pages(browser, tmp_path / "screenshots")
    opened.folder.mkdir()
    try:
        yield opened
    finally:
        opened.close()
    if opened.left:
        pytest.fail(f"the console's pages made requests that left 127.0.0.1: {opened.left}")


def log_in(page: Page, console: Console, token: str | None = None, path: str = "/ui/jobs") -> None:
    page.goto(console.url + path)
    page.get_by_label("Tenant token").fill(token or console.token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


@contextmanager
def serving(harness: Harness, tokens: Path, **app: Any) -> Iterator[tuple[str, EventHub]]:
    """The REST API and the console of ``harness``'s scheduler (whose loop runs: the Docker-backed console tests)
    on uvicorn on 127.0.0.1, its event hub following etcd; ``app``: `create_app`'s other arguments. Yields the URL and
    the hub; at the end the hub's streams are closed (an open page's stream would hold uvicorn) and both stop."""
    events = EventHub(harness.root, streams_per_address=8)
    following = asyncio.run_coroutine_threadsafe(follow_etcd(events, harness.service.shared.store.etcd), harness.loop)
    wait_until(events.ready.is_set, timeout=30, message="the event hub to follow etcd")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app_served = create_app(harness.service, tokens, events=events, **app)
    server = uvicorn.Server(uvicorn.Config(app_served, log_level="warning"))
    serving_task = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), harness.loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", events
    finally:
        harness.loop.call_soon_threadsafe(events.close)
        server.should_exit = True
        serving_task.result(timeout=30)
        following.cancel()
        sock.close()
