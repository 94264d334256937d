"""What `learnerkit scheduler serve` needs from the scheduler: its facade, metrics registry and lifespan.

``learnerkit.scheduler.factory.create_scheduler(settings) -> HostedScheduler`` builds the real one and the CLI
hands it to ``serve``; the API room never imports it, so the API is tested against a fake facade.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from securesystemslib.signer import Signer

from learnerkit.common.keyring import PublishedKey
from learnerkit.scheduler.config.settings import SchedulerSettings
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.facade import SchedulerFacade

Lifespan = Callable[[], AbstractAsyncContextManager[None]]
"""Entered once the server's event loop runs (connect etcd, start the monitor), left on shutdown."""
HealthCheck = Callable[[], str | None]
"""Why the scheduler is unhealthy (its control loop stalled), or None: what ``/healthz`` answers."""


@dataclass(frozen=True)
class HostedScheduler:
    facade: SchedulerFacade
    registry: CollectorRegistry | None = None
    """Served at ``/metrics`` when given."""
    operator_registry: CollectorRegistry | None = None
    """Added to ``/metrics`` for a request with an operator's token: what names tenants (their usage)."""
    lifespan: Lifespan | None = None
    public_key: str | None = None
    """The platform's public signing key (PEM), served at ``/v1/signing-key``."""
    keys: tuple[PublishedKey, ...] = ()
    """Every public key the platform signed with, the current one first, served at ``/v1/keys``."""
    health: HealthCheck | None = None
    signer: Signer | None = None
    """The platform's signer: the model catalog's alias moves are signed with it (``POST /v1/models/...``)."""
    events: EventHub | None = None
    """Served at ``/v1/events`` and to the console's live pages; fed by the lifespan."""


SchedulerFactory = Callable[[SchedulerSettings], HostedScheduler]
"""Builds the scheduler from settings without doing I/O; the I/O belongs in the lifespan."""
