"""`learnerkit scheduler serve`: settings in, the scheduler built by its factory, the API served by uvicorn."""

from __future__ import annotations

import importlib

import uvicorn
from fastapi import FastAPI

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.hosting import HostedScheduler, SchedulerFactory
from learnerkit.scheduler.config.settings import SchedulerSettings
from learnerkit.scheduler.errors import SchedulerError

HOSTED_MODULE = "learnerkit.scheduler.factory"


def serve(settings: SchedulerSettings, factory: SchedulerFactory | None = None) -> None:
    """Build the scheduler (``factory``, by default ``learnerkit.scheduler.factory.create_scheduler``) and serve its
    API until SIGINT or SIGTERM."""
    hosted = (factory or load_scheduler_factory())(settings)
    app = create_app(
        hosted.facade, settings.api.tokens, limits=settings.limits, registry=hosted.registry, lifespan=hosted.lifespan
    )
    uvicorn.Server(uvicorn_config(app, settings.api.host, settings.api.port, "info")).run()


def uvicorn_config(app: FastAPI, host: str, port: int, log_level: str) -> uvicorn.Config:
    """uvicorn with its C parts named, not left to whatever is installed: httptools parses HTTP and uvloop runs
    the event loop. A submit relays its model code (100 MB and more) through the API; h11 and asyncio's own
    loop cost that relay a tenth of its throughput (bench/model_upload.py, docs/dependencies.md)."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http="httptools", loop="uvloop")


def load_scheduler_factory() -> SchedulerFactory:
    """``create_scheduler`` of ``hosted``, imported only now: the API layer never depends on it."""
    module = importlib.import_module(HOSTED_MODULE)
    factory = getattr(module, "create_scheduler", None)
    if not callable(factory):
        raise SchedulerError(f"{HOSTED_MODULE} has no create_scheduler(settings) -> HostedScheduler")
    return _checked(factory)


def _checked(factory: SchedulerFactory) -> SchedulerFactory:
    def build(settings: SchedulerSettings) -> HostedScheduler:
        hosted = factory(settings)
        if not isinstance(hosted, HostedScheduler):
            raise SchedulerError(
                f"{HOSTED_MODULE}.create_scheduler returned {type(hosted).__name__}, not HostedScheduler"
            )
        return hosted

    return build
