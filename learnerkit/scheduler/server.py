"""`learnerkit scheduler serve`: settings in, the service built by its factory, the API served by uvicorn."""

from __future__ import annotations

import importlib

import uvicorn

from learnerkit.scheduler.api import create_app
from learnerkit.scheduler.errors import SchedulerError
from learnerkit.scheduler.hosting import HostedScheduler, SchedulerFactory
from learnerkit.scheduler.settings import SchedulerSettings

SERVICE_MODULE = "learnerkit.scheduler.hosted"


def serve(settings: SchedulerSettings, factory: SchedulerFactory | None = None) -> None:
    """Build the service (``factory``, by default ``learnerkit.scheduler.hosted.create_scheduler``) and serve its
    API until SIGINT or SIGTERM."""
    service = (factory or load_service_factory())(settings)
    app = create_app(service.facade, settings.api.tokens, registry=service.registry, lifespan=service.lifespan)
    config = uvicorn.Config(app, host=settings.api.host, port=settings.api.port, log_level="info")
    uvicorn.Server(config).run()


def load_service_factory() -> SchedulerFactory:
    """``create_scheduler`` of the service module, imported only now: the API layer never depends on it."""
    module = importlib.import_module(SERVICE_MODULE)
    factory = getattr(module, "create_scheduler", None)
    if not callable(factory):
        raise SchedulerError(f"{SERVICE_MODULE} has no create_scheduler(settings) -> HostedScheduler")
    return _checked(factory)


def _checked(factory: SchedulerFactory) -> SchedulerFactory:
    def build(settings: SchedulerSettings) -> HostedScheduler:
        service = factory(settings)
        if not isinstance(service, HostedScheduler):
            raise SchedulerError(
                f"{SERVICE_MODULE}.create_scheduler returned {type(service).__name__}, not HostedScheduler"
            )
        return service

    return build
