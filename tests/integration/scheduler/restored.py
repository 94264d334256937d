"""A real Scheduler restored from jobs written to the real etcd, behind the real REST API (uvicorn on 127.0.0.1 in a
thread of its own): what the API tests that deploy nothing share."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import uvicorn

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.config.policy import SubmitPolicy
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.store import JobStore
from tests.integration.conftest import REPO
from tests.waiting import wait_until

T = TypeVar("T")


@contextmanager
def restored_scheduler(
    etcd_server: Any, tokens: Path, object_stores: tuple[str, ...], write: Callable[[JobStore], Awaitable[T]]
) -> Iterator[tuple[str, T]]:
    """The API's URL and what ``write`` returned: ``write`` puts jobs in a store under a root of this call's own, a
    Scheduler on the Docker backend (nothing is deployed) is rebuilt from them and served; all stopped and the root
    deleted at the end."""
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=object_stores),
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    root = f"/learnerkit-restored-{uuid.uuid4().hex[:8]}/jobs"

    async def start() -> tuple[EtcdStore, Scheduler, T]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        written = await write(store)
        scheduler = Scheduler(store, DockerBackend(), options)
        await scheduler.loop.rebuild()
        return etcd, scheduler, written

    etcd, scheduler, written = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(scheduler, tokens), log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", written
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        sock.close()
        asyncio.run_coroutine_threadsafe(etcd.delete_prefix(root.rsplit("/", 1)[0] + "/"), loop).result(30)
        asyncio.run_coroutine_threadsafe(etcd.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
