"""The hub fed from etcd: one watch from the revision this scheduler's stream starts at, of the folder holding the
jobs' root and the sweeps' beside it (``/learnerkit/`` for ``/learnerkit/jobs``): one watch keeps one order of
revisions for both; `changes.change_of` drops every other key there (credentials, node marks)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from datetime import UTC, datetime

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore, WatchEvent
from learnerkit.scheduler.events.changes import Change
from learnerkit.scheduler.events.hub import EventHub
from learnerkit.scheduler.sweeps.store import sweeps_root


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

    folder = sweeps_root(root).rsplit("/", 1)[0] + "/"  # the jobs' and the sweeps' parent, by sweeps_root's rule

    async def watch() -> AsyncGenerator[WatchEvent, None]:
        async for event in etcd.watch_prefix(folder, start_revision=revision + 1):
            yield event

    async def tenant_of(change: Change) -> str | None:
        try:
            if change.sweep_id:
                stored = await etcd.get(f"{sweeps_root(root)}/{change.sweep_id}/spec")
            else:
                stored = await etcd.get(keys.job_status_key(change.job_id, root))
            return str(json.loads(stored[0])["tenant"]) if stored else None
        except (ValueError, KeyError, TypeError):
            return None  # not a job id, or a foreign key under the root

    await hub.run(start, watch, tenant_of)
