"""What the scheduler benchmarks share: the real REST API over a real Scheduler in a child process, and the
wait for it to answer."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import uvicorn

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.scheduler.api import create_app
from learnerkit.scheduler.core import Scheduler
from learnerkit.scheduler.errors import SchedulerUnreachableError
from learnerkit.scheduler.jobstore import JobStore

T = TypeVar("T")


def serve_scheduler(scheduler: Scheduler, store: JobStore, etcd_endpoint: str, tokens: Path, port: int) -> None:
    """Serve the API on 127.0.0.1:``port`` until killed: etcd connected, jobs rebuilt and the loop running."""

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        etcd = await EtcdStore.connect(EtcdSettings(endpoints=(etcd_endpoint,)))
        store.attach(etcd)
        await scheduler.rebuild()
        stop = asyncio.Event()
        loop = asyncio.create_task(scheduler.run(stop))
        try:
            yield
        finally:
            stop.set()
            await loop
            await etcd.close()

    app = create_app(scheduler, tokens, lifespan=lifespan)
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")).run()


def once_served(call: Callable[[], T], child: subprocess.Popen[bytes], timeout_s: float) -> T:
    """``call``'s answer once the child's API answers; its error when the child died or the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except SchedulerUnreachableError:
            if time.monotonic() > deadline or child.poll() is not None:
                raise
            time.sleep(0.2)
