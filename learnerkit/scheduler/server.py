"""`learnerkit scheduler serve`: settings in, the service built by its factory, the API served by uvicorn."""

from __future__ import annotations

import importlib

import uvicorn

from learnerkit_scheduler.api import create_app
from learnerkit_scheduler.errors import SchedulerError
from learnerkit_scheduler.hosting import HostedService, ServiceFactory
from learnerkit_scheduler.settings import SchedulerSettings

SERVICE_MODULE = "learnerkit_scheduler.hosted"


def serve(settings: SchedulerSettings, factory: ServiceFactory | None = None) -> None:
    """Build the service (``factory``, by default ``learnerkit_scheduler.hosted.create_service``) and serve its
    API until SIGINT or SIGTERM."""
    service = (factory or load_service_factory())(settings)
    app = create_app(service.facade, settings.api.tokens, registry=service.registry, lifespan=service.lifespan)
    config = uvicorn.Config(app, host=settings.api.host, port=settings.api.port, log_level="info")
    uvicorn.Server(config).run()


def load_service_factory() -> ServiceFactory:
    """``create_service`` of the service module, imported only now: the API layer never depends on it."""
    module = importlib.import_module(SERVICE_MODULE)
    factory = getattr(module, "create_service", None)
    if not callable(factory):
        raise SchedulerError(f"{SERVICE_MODULE} has no create_service(settings) -> HostedService")
    return _checked(factory)


def _checked(factory: ServiceFactory) -> ServiceFactory:
    def build(settings: SchedulerSettings) -> HostedService:
        service = factory(settings)
        if not isinstance(service, HostedService):
            raise SchedulerError(
                f"{SERVICE_MODULE}.create_service returned {type(service).__name__}, not HostedService"
            )
        return service

    return build
