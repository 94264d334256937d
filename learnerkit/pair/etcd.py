"""What the host side reads from and writes to etcd for a pair: the learner's status, the halt key.

Each call connects, does its work and closes; a transient error (etcd restarting, a connect timeout) is
retried with the sidecar's backoff (:data:`controller_sidecar.retry.HOST_CALLS`), every call being idempotent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.retry import HOST_CALLS, retry_async
from controller_sidecar.settings import EtcdSettings
from controller_sidecar.status import StatusRecord
from learnerkit.common.errors import ConfigError

T = TypeVar("T")


def etcd_settings(endpoints: str) -> EtcdSettings:
    return EtcdSettings(endpoints=tuple(part.strip() for part in endpoints.split(",") if part.strip()))


def _call(settings: EtcdSettings, operation: Callable[[EtcdStore], Awaitable[T]], what: str) -> T:
    async def once() -> T:
        store = await EtcdStore.connect(settings)
        try:
            return await operation(store)
        finally:
            await store.close()

    return asyncio.run(retry_async(once, HOST_CALLS, what=what))


def learner_status(settings: EtcdSettings, job_id: str, learner_id: int) -> StatusRecord | None:
    key = keys.learner_status_key(job_id, learner_id, settings.root)
    found = _call(settings, lambda store: store.get(key), f"read {key}")
    return None if found is None else StatusRecord.from_json(found[0])


def learner_metrics(settings: EtcdSettings, job_id: str, learner_id: int) -> dict[str, object]:
    key = keys.learner_metrics_key(job_id, learner_id, settings.root)
    found = _call(settings, lambda store: store.get(key), f"read {key}")
    return {} if found is None else dict(json.loads(found[0]))


async def put_halt(store: EtcdStore, job_id: str, root: str = keys.ROOT) -> None:
    """Ask every learner of the job to halt: the one writer of the halt key, which the sidecars watch."""
    await store.put(keys.halt_key(job_id, root), "halt")


def request_halt(settings: EtcdSettings, job_id: str) -> None:
    """Halt a pair run by hand; a job of the scheduler is refused, since the scheduler must record its halt."""

    async def halt(store: EtcdStore) -> None:
        if await store.get(keys.spec_key(job_id, settings.root)) is not None:
            raise ConfigError(f"job {job_id} is run by the scheduler: halt it with `learnerkit job halt {job_id}`")
        await put_halt(store, job_id, settings.root)

    _call(settings, halt, f"halt {job_id}")


def halt_jobs(settings: EtcdSettings, job_ids: Collection[str]) -> None:
    """Ask every learner of these jobs to halt, whoever runs them (``dev down``: the services go away)."""

    async def halt(store: EtcdStore) -> None:
        for job_id in job_ids:
            await put_halt(store, job_id, settings.root)

    _call(settings, halt, f"halt {', '.join(sorted(job_ids))}")


def job_history(settings: EtcdSettings, job_id: str) -> list[StatusRecord]:
    """Every status transition of the job's learners, in the order each learner reported them."""
    prefix = keys.history_prefix(job_id, settings.root)
    found = _call(settings, lambda store: store.get_prefix(prefix), f"read {prefix}*")
    records = [StatusRecord.from_json(value) for value in found.values()]
    return sorted(records, key=lambda record: (record.learner_id, record.sequence))
