"""`learnerkit scheduler serve`: settings in, the scheduler built by the factory it is handed, the API served by
uvicorn."""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.headers import BoundedHeadProtocol
from learnerkit.scheduler.api.hosting import SchedulerFactory
from learnerkit.scheduler.config.settings import SchedulerSettings


def serve(settings: SchedulerSettings, factory: SchedulerFactory) -> None:
    """Build the scheduler with ``factory`` (the CLI hands it ``learnerkit.scheduler.factory.create_scheduler``, a
    room above this one) and serve its API until SIGINT or SIGTERM."""
    hosted = factory(settings)
    app = create_app(
        hosted.facade,
        settings.api.tokens,
        limits=settings.limits,
        registry=hosted.registry,
        lifespan=hosted.lifespan,
        public_key=hosted.public_key,
    )
    uvicorn.Server(uvicorn_config(app, settings.api.host, settings.api.port, "info")).run()


def uvicorn_config(app: FastAPI, host: str, port: int, log_level: str) -> uvicorn.Config:
    """uvicorn with its C parts named, not left to whatever is installed: httptools parses HTTP and uvloop runs
    the event loop. A submit relays its model code (100 MB and more) through the API; h11 and asyncio's own
    loop cost that relay a tenth of its throughput (bench/model_upload.py, docs/dependencies.md). The protocol bounds
    each request's head (431 past `MAX_HEAD_BYTES` or `MAX_HEADERS`, `learnerkit.scheduler.api.headers`)."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=BoundedHeadProtocol, loop="uvloop")
