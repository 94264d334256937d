"""`learnerkit scheduler serve`: settings in, the scheduler built by the factory it is handed, the API served by
uvicorn."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import uvicorn
import uvloop
from fastapi import FastAPI

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.connections import ConnectionLimits, guarded_protocol
from learnerkit.scheduler.api.hosting import SchedulerFactory
from learnerkit.scheduler.config.settings import SchedulerSettings
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit.scheduler.errors import SettingsError
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.series.stored import default_folder as series_folder

LOGGER = logging.getLogger(__name__)


def serve(settings: SchedulerSettings, factory: SchedulerFactory) -> None:
    """Build the scheduler with ``factory`` (the CLI hands it ``learnerkit.scheduler.factory.create_scheduler``, a
    room above this one) and serve its API until SIGINT or SIGTERM.

    The scheduler's lifespan (the etcd lock, the rebuild, the loop) is entered here around uvicorn, not as the app's
    lifespan: a start it refuses (another scheduler holds the etcd root, the sidecar image is missing) reaches the
    caller as the `LearnerkitError` it is, one line and exit code 1, instead of uvicorn's traceback and exit 3."""
    tls = settings.api.tls()
    if tls is not None:
        check_tls_files(*tls)
    elif not is_loopback(settings.api.host):
        LOGGER.warning(
            "serving plain HTTP on %s: tokens and model code cross the network in clear; "
            "give --tls-cert and --tls-key (`learnerkit scheduler cert create` makes them)",
            settings.api.host,
        )
    hosted = factory(settings)
    app = create_app(
        hosted.facade,
        settings.api.tokens,
        limits=settings.limits,
        registry=hosted.registry,
        operator_registry=hosted.operator_registry,
        public_key=hosted.public_key,
        keys=hosted.keys,
        health=hosted.health,
        catalog=settings.catalog_registry,
        signer=hosted.signer,
        events=hosted.events,
        series_folder=series_folder(),
        console=ConsoleSettings(
            own_names(settings.api.host, (socket.gethostname(), socket.getfqdn())), secure=tls is not None
        ),
    )
    limits = ConnectionLimits.from_settings(settings)
    server = StreamingServer(uvicorn_config(app, settings.api.host, settings.api.port, "info", limits, tls))
    server.events = hosted.events

    async def run() -> None:
        if hosted.lifespan is None:
            await server.serve()
            return
        async with hosted.lifespan():
            await server.serve()

    with _signals_after_shutdown(server), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())


class StreamingServer(uvicorn.Server):
    """uvicorn waits at shutdown for every response to end; an event stream never does by itself, so its hub
    ends them all first (their clients reconnect to the next scheduler and resume)."""

    events: EventHub | None = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.events is not None:
            self.events.close()
        await super().shutdown(sockets)


@contextmanager
def _signals_after_shutdown(server: uvicorn.Server) -> Iterator[None]:
    """uvicorn raises the SIGINT or SIGTERM it stopped for again as soon as it stops serving, which would end the
    process before the scheduler's lifespan releases its etcd lock. Those signals land here instead (one before
    uvicorn serves stops it at once) and are raised again once everything has stopped."""
    caught: list[int] = []

    def catch(sig: int, _frame: FrameType | None) -> None:
        caught.append(sig)
        server.should_exit = True

    previous = {sig: signal.signal(sig, catch) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for number in dict.fromkeys(caught):
        signal.raise_signal(number)


def check_tls_files(cert: Path, key: Path) -> None:
    """Load the pair as the server will, so a missing file or a key that is not the certificate's stops the start
    with one line naming them, not uvicorn's traceback."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise SettingsError(f"--tls-cert {cert}, --tls-key {key}: cannot serve HTTPS with them: {e}") from e


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def uvicorn_config(
    app: FastAPI,
    host: str,
    port: int,
    log_level: str,
    limits: ConnectionLimits | None = None,
    tls: tuple[Path, Path] | None = None,
) -> uvicorn.Config:
    """uvicorn with its C parts named, not left to whatever is installed: httptools parses HTTP and uvloop runs
    the event loop. A submit relays its model code (100 MB and more) through the API; h11 and asyncio's own
    loop cost that relay a tenth of its throughput (bench/model_upload.py, docs/dependencies.md). The protocol bounds
    each request's head (431 past `MAX_HEAD_BYTES` or `MAX_HEADERS`, `learnerkit.scheduler.api.headers`), the time
    a request may take to arrive and the connections open at once (``limits``, default `ConnectionLimits()`,
    `learnerkit.scheduler.api.connections`). With ``tls`` (certificate, key) it serves HTTPS only."""
    protocol = guarded_protocol(limits or ConnectionLimits())
    cert, key = tls if tls is not None else (None, None)
    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, http=protocol, loop="uvloop", ssl_certfile=cert, ssl_keyfile=key
    )
