"""The hub fed from etcd: a watch of the jobs' root from the revision this scheduler's stream starts at."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from datetime import UTC, datetime

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore, WatchEvent
from learnerkit.scheduler.events.hub import EventHub


def start_key(root: str) -> str:
    """Beside the jobs' prefix (``/learnerkit/jobs.events``): when this scheduler's stream started. Writing it
    gives the revision the stream starts after; events before it are not replayed (a client gets a snapshot)."""
    return f"{root.rstrip('/')}.events"


async def follow_etcd(hub: EventHub, etcd: EtcdStore) -> None:
    """Run ``hub`` on etcd's changes until cancelled (a task for the server's life)."""
    root = hub.root
    revision = 0

    async def start() -> int:
        nonlocal revision
        revision = await etcd.put(start_key(root), json.dumps({"started_at": datetime.now(UTC).isoformat()}))
        return revision

    async def watch() -> AsyncGenerator[WatchEvent, None]:
        async for event in etcd.watch_prefix(root + "/", start_revision=revision + 1):
            yield event

    async def tenant_of(job_id: str) -> str | None:
        try:
            stored = await etcd.get(keys.job_status_key(job_id, root))
        except ValueError:
            return None  # not a job id: a foreign key under the root
        return str(json.loads(stored[0]).get("tenant")) if stored else None

    await hub.run(start, watch, tenant_of)
