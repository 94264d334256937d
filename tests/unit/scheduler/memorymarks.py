"""Node marks kept in memory: the real :class:`NodeMarks` over a dictionary standing for etcd."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.nodes.marks import NodeMarks


class MemoryEtcd:
    """The key-value calls :class:`NodeMarks` makes."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    async def get(self, key: str) -> tuple[bytes, int] | None:
        return (self.values[key], 1) if key in self.values else None

    async def get_prefix(self, prefix: str) -> dict[str, bytes]:
        return {k: v for k, v in self.values.items() if k.startswith(prefix)}

    async def put(self, key: str, value: str | bytes) -> int:
        self.values[key] = value.encode() if isinstance(value, str) else value
        return 1

    async def create_all(self, guard: str, items: Mapping[str, str | bytes]) -> bool:
        if guard in self.values:
            return False
        for key, value in items.items():
            await self.put(key, value)
        return True

    async def delete(self, key: str) -> None:
        self.values.pop(key, None)


class MemoryMarks(NodeMarks):
    def __init__(self, root: str = "/learnerkit/jobs") -> None:
        super().__init__(JobStore(root=root))
        self.memory = MemoryEtcd()

    @property
    def etcd(self) -> EtcdStore:
        return cast(EtcdStore, self.memory)
