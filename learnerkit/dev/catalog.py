"""The dev services, in start order: the one place a new service (the scheduler) is added.

Order matters: a service's ``prepare`` sees the scrape targets of those started before it, so Prometheus
comes last.
"""

from __future__ import annotations

from learnerkit.dev.etcd import ETCD_SERVICE
from learnerkit.dev.prometheus import PROMETHEUS_SERVICE
from learnerkit.dev.registry import REGISTRY_SERVICE
from learnerkit.dev.s3 import S3_SERVICE
from learnerkit.dev.scheduler import SCHEDULER_SERVICE
from learnerkit.dev.service import Service

DEV_SERVICES: tuple[Service, ...] = (
    ETCD_SERVICE,
    S3_SERVICE,
    REGISTRY_SERVICE,
    SCHEDULER_SERVICE,
    PROMETHEUS_SERVICE,
)
