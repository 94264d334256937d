"""`GET /v1/events` served by uvicorn (`StreamingServer`) over the fake facade, the hub fed by a fake watch: the
token's tenant only, the caps answered 429, and a shutdown that does not wait for open streams."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import requests
import uvicorn

from controller_sidecar.etcdstore import WatchEvent
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.server import StreamingServer
from learnerkit.scheduler.events.hub import EventHub
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade
from tests.waiting import wait_until

ROOT = "/lk/jobs"


@dataclass
class Served:
    url: str
    server: StreamingServer
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop | None = None
    queue: asyncio.Queue[WatchEvent] = field(default_factory=asyncio.Queue)

    def put(self, job_id: str, tenant: str, reason: str, revision: int) -> None:
        value = json.dumps({"tenant": tenant, "status": "QUEUED", "reason": reason}).encode()
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.queue.put_nowait, WatchEvent(f"{ROOT}/{job_id}/status", value, revision))


@pytest.fixture
def served(fake: FakeFacade, tenants: Tenants) -> Iterator[Served]:
    hub = EventHub(ROOT, streams_per_address=2)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    holder: list[Served] = []

    async def start() -> int:
        return 1

    async def watch() -> AsyncGenerator[WatchEvent, None]:
        while True:
            yield await holder[0].queue.get()

    async def no_tenant(_job_id: str) -> str | None:
        return None

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        holder[0].loop = asyncio.get_running_loop()
        holder[0].queue = asyncio.Queue()
        task = asyncio.create_task(hub.run(start, watch, no_tenant))
        yield
        task.cancel()

    server = StreamingServer(
        uvicorn.Config(create_app(fake, tenants.path, lifespan=lifespan, events=hub), log_level="warning")
    )
    server.events = hub
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    holder.append(Served(f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread))
    thread.start()
    wait_until(lambda: server.started and hub.ready.is_set(), timeout=10, message="uvicorn and the hub to start")
    yield holder[0]
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def stream(served: Served, token: str) -> requests.Response:
    return requests.get(
        served.url + "/v1/events", headers={"Authorization": f"Bearer {token}"}, stream=True, timeout=(5, 20)
    )


def test_a_stream_carries_its_tenants_events_only(served: Served, tenants: Tenants) -> None:
    answer = stream(served, tenants.b)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    served.put("job-a", "team-a", "secret-of-a", 2)
    served.put("job-b", "team-b", "for-b", 3)
    data = []
    for line in answer.iter_lines(decode_unicode=True):
        if line.startswith("data: "):
            data.append(json.loads(line.removeprefix("data: ")))
            if data[-1]["reason"] == "for-b":
                break
    answer.close()
    assert [d["job_id"] for d in data] == ["job-b"]


def test_streams_past_the_cap_of_an_address_are_refused_429(served: Served, tenants: Tenants) -> None:
    open_ = [stream(served, tenants.a), stream(served, tenants.b)]
    refused = stream(served, tenants.a)
    assert refused.status_code == 429
    assert refused.json()["error"] == "too_many_streams" and "127.0.0.1" in refused.json()["message"]
    for answer in open_:
        answer.close()


def test_no_token_no_stream(served: Served) -> None:
    assert requests.get(served.url + "/v1/events", timeout=10).status_code == 401


def test_a_shutdown_ends_open_streams_instead_of_waiting_for_them(served: Served, tenants: Tenants) -> None:
    answer = stream(served, tenants.a)
    assert answer.status_code == 200
    served.server.should_exit = True
    served.thread.join(timeout=15)
    assert not served.thread.is_alive(), "the server waited for the open stream"
    assert answer.raw.read() is not None
