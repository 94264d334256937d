"""``create_service``: the real scheduler behind ``learnerkit scheduler serve``.

Nothing here does I/O until the API server's lifespan runs: then it connects etcd, rebuilds the jobs and
starts the scheduling loop, and on shutdown stops the loop (running jobs go on; a restart finds them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings as SidecarEtcdSettings
from learnerkit_build.project import find_project_root
from learnerkit_build.sidecarimage import sidecar_reference
from learnerkit_scheduler.backends.docker import DockerBackend
from learnerkit_scheduler.errors import SettingsError
from learnerkit_scheduler.hosting import HostedService
from learnerkit_scheduler.images import ImageCatalog
from learnerkit_scheduler.jobstore import JobStore
from learnerkit_scheduler.planning import Platform
from learnerkit_scheduler.service import SchedulerService, ServiceOptions
from learnerkit_scheduler.settings import BackendKind, SchedulerSettings


def create_service(settings: SchedulerSettings) -> HostedService:
    if settings.backend.kind is not BackendKind.DOCKER:
        raise SettingsError(
            f"backend {settings.backend.kind.value!r}: `scheduler serve` runs the Docker backend; the Kubernetes "
            "backend (learnerkit_scheduler.backends.k8s) is driven through its own API for now"
        )
    catalog = ImageCatalog(find_project_root(), settings.backend.registry)
    options = ServiceOptions(
        platform=Platform(
            etcd_endpoints=",".join(settings.etcd.endpoints),
            sidecar_image=settings.backend.sidecar_image or sidecar_reference(),
        ),
        catalog=catalog.frameworks(),
        resolve_image=catalog.resolve,
    )
    store = JobStore(root=settings.etcd.root)
    service = SchedulerService(store, DockerBackend(), options)
    etcd_settings = SidecarEtcdSettings(
        endpoints=settings.etcd.endpoints,
        username=settings.etcd.username,
        password=settings.etcd.password,
        root=settings.etcd.root,
    )

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        etcd = await EtcdStore.connect(etcd_settings)
        store.attach(etcd)
        await service.rebuild()
        stop = asyncio.Event()
        loop = asyncio.create_task(service.run(stop), name="scheduler loop")
        try:
            yield
        finally:
            stop.set()
            await loop
            await etcd.close()

    return HostedService(facade=service, registry=service.metrics.registry, lifespan=lifespan)
