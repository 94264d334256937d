"""The hub fed from etcd: one watch from the revision this scheduler's stream starts at, of the one key range that
holds the jobs' keys and the sweeps' beside them (``/learnerkit/jobs/`` up to the end of ``/learnerkit/sweeps/``):
one watch keeps one order of revisions for both, and the keys beside them (credentials, node marks, the catalog,
the stream's own start) never reach the hub. A job's or a sweep's tenant the change does not name is read from
one small key: the job's status, the sweep's ``tenant``."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from datetime import UTC, datetime

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore, WatchEvent
from learnerkit.scheduler.events.changes import Change
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.sweeps.store import SweepStore, sweeps_root


def start_key(root: str) -> str:
    """Beside the jobs' prefix (``/learnerkit/jobs.events``): when this scheduler's stream started. Writing it
    gives the revision the stream starts after; events before it are not replayed (a client gets a snapshot)."""
    return f"{root.rstrip('/')}.events"


def watched_range(root: str) -> tuple[str, str]:
    """[first, end) covering the jobs' prefix and the sweeps' (``/learnerkit/jobs/`` .. ``/learnerkit/sweeps0``,
    ``0`` being the byte after ``/``), whichever sorts first; under ``/learnerkit/`` nothing else lies between."""
    first, last = sorted((root.rstrip("/") + "/", sweeps_root(root) + "/"))
    return first, last[:-1] + "0"


async def follow_etcd(hub: EventHub, etcd: EtcdStore) -> None:
    """Run ``hub`` on etcd's changes until cancelled (a task for the server's life)."""
    root = hub.root
    revision = 0
    sweeps = SweepStore(etcd, root)

    async def start() -> int:
        nonlocal revision
        revision = await etcd.put(start_key(root), json.dumps({"started_at": datetime.now(UTC).isoformat()}))
        return revision

    async def watch() -> AsyncGenerator[WatchEvent, None]:
        async for event in etcd.watch_range(*watched_range(root), start_revision=revision + 1):
            yield event

    async def tenant_of(change: Change) -> str | None:
        """Raises on a key that names no job or a record that does not parse: the hub skips the change, once
        logged."""
        if change.sweep_id:
            return await sweeps.tenant(change.sweep_id)
        stored = await etcd.get(keys.job_status_key(change.job_id, root))
        return str(json.loads(stored[0])["tenant"]) if stored else None

    await hub.run(start, watch, tenant_of)
