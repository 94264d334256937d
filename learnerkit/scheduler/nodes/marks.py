"""Drain marks and the known nodes, in etcd beside the jobs' prefix (``/learnerkit/jobs.nodes/...``).

``drained/<node>`` marks a node drained (its value: when, ISO-8601 UTC): the scheduler places no learner there and
moves the jobs it holds off through halt and resume. The mark outlives a scheduler restart; deleting it (undrain)
gives the node back. ``known`` is the node names the serving scheduler last read (JSON list), so that a drain of a
node it does not know is refused by name. ``states`` is each node's state as the scheduler last read it (JSON object:
``ready``, ``cordoned``, ``not-ready``, ``lost``), for ``scheduler nodes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.settings import EtcdSettings
from learnerkit.scheduler.errors import UnknownNodeError
from learnerkit.scheduler.jobs.state import now_iso
from learnerkit.scheduler.jobs.store import JobStore


def nodes_prefix(root: str) -> str:
    return f"{root.rstrip('/')}.nodes/"


@dataclass(frozen=True)
class DrainChange:
    node: str
    drained: bool
    changed: bool
    """False where the node already was so."""


class NodeMarks:
    """Over the job store's etcd and beside its root (read when used: an etcd attached later works)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    @property
    def root(self) -> str:
        return self.store.root

    @property
    def etcd(self) -> EtcdStore:
        return self.store.etcd

    async def drained(self) -> frozenset[str]:
        prefix = f"{nodes_prefix(self.root)}drained/"
        found = await self.etcd.get_prefix(prefix)
        return frozenset(key[len(prefix) :] for key in found)

    async def known(self) -> list[str] | None:
        """The node names the scheduler last published; None where none did yet."""
        stored = await self.etcd.get(f"{nodes_prefix(self.root)}known")
        return [str(name) for name in json.loads(stored[0])] if stored else None

    async def publish_known(self, names: Iterable[str]) -> None:
        await self.etcd.put(f"{nodes_prefix(self.root)}known", json.dumps(sorted(set(names))))

    async def states(self) -> dict[str, str]:
        """Each node's state as the scheduler last published it (``ready``, ``cordoned``, ``not-ready``, ``lost``)."""
        stored = await self.etcd.get(f"{nodes_prefix(self.root)}states")
        return {str(k): str(v) for k, v in json.loads(stored[0]).items()} if stored else {}

    async def publish_states(self, states: Mapping[str, str]) -> None:
        await self.etcd.put(f"{nodes_prefix(self.root)}states", json.dumps(dict(states), sort_keys=True))

    async def drain(self, node: str) -> DrainChange:
        """Mark ``node`` drained; a node the scheduler does not know is refused, naming the known ones."""
        await self._check_known(node)
        key = f"{nodes_prefix(self.root)}drained/{node}"
        changed = await self.etcd.create_all(key, {key: now_iso()})
        return DrainChange(node, drained=True, changed=changed)

    async def undrain(self, node: str) -> DrainChange:
        key = f"{nodes_prefix(self.root)}drained/{node}"
        if node not in await self.drained():
            await self._check_known(node)
            return DrainChange(node, drained=False, changed=False)
        await self.etcd.delete(key)
        return DrainChange(node, drained=False, changed=True)

    async def _check_known(self, node: str) -> None:
        known = await self.known()
        if known is None or node not in known:
            listing = ", ".join(known) if known else "none (no scheduler has served this etcd root yet)"
            raise UnknownNodeError(f"no node {node!r} under the etcd root {self.root}; the known nodes: {listing}")


async def mark_node(settings: EtcdSettings, node: str, *, drained: bool) -> DrainChange:
    """Drain or undrain ``node`` under ``settings.root`` (the operator's command: the serving scheduler acts on
    the mark at its next read of the nodes)."""
    etcd = await EtcdStore.connect(settings)
    try:
        marks = NodeMarks(JobStore(etcd, settings.root))
        return await (marks.drain(node) if drained else marks.undrain(node))
    finally:
        await etcd.close()
