"""`learnerkit scheduler serve`: settings in, the scheduler built by its factory, the API served by uvicorn."""

from __future__ import annotations

import importlib

import uvicorn

from learnerkit.scheduler.api import create_app
from learnerkit.scheduler.errors import SchedulerError
from learnerkit.scheduler.hosting import HostedScheduler, SchedulerFactory
from learnerkit.scheduler.settings import SchedulerSettings

HOSTED_MODULE = "learnerkit.scheduler.hosted"


def serve(settings: SchedulerSettings, factory: SchedulerFactory | None = None) -> None:
    """Build the scheduler (``factory``, by default ``learnerkit.scheduler.hosted.create_scheduler``) and serve its
    API until SIGINT or SIGTERM."""
    hosted = (factory or load_scheduler_factory())(settings)
    app = create_app(
        hosted.facade, settings.api.tokens, limits=settings.limits, registry=hosted.registry, lifespan=hosted.lifespan
    )
    config = uvicorn.Config(app, host=settings.api.host, port=settings.api.port, log_level="info")
    uvicorn.Server(config).run()


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
