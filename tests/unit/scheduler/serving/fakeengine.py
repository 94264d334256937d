"""A stand-in for the Docker engine's containers and networks as `backends.modelservers` reads them: found by
label (every label of a filter must match, as Docker's do) or by name, stopped and removed; no process runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _matches(labels: dict[str, str], filters: dict[str, Any] | None) -> bool:
    wanted = (filters or {}).get("label", [])
    for item in [wanted] if isinstance(wanted, str) else wanted:
        key, equals, value = item.partition("=")
        if key not in labels or (equals and labels[key] != value):
            return False
    return True


@dataclass
class FakeContainer:
    engine: FakeEngine
    name: str
    labels: dict[str, str]
    port: int
    created: str
    status: str = "running"

    @property
    def attrs(self) -> dict[str, Any]:
        ports = {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(self.port)}] if self.status == "running" else []}
        return {"Created": self.created, "NetworkSettings": {"Ports": ports}, "HostConfig": {}}

    def reload(self) -> None:
        return

    def stop(self, timeout: int) -> None:
        self.status = "exited"

    def remove(self, force: bool = False) -> None:
        self.engine.removed.append(self.name)
        self.engine.all.remove(self)


@dataclass
class FakeNetwork:
    engine: FakeEngine
    name: str
    labels: dict[str, str]

    def remove(self) -> None:
        self.engine.removed.append(self.name)
        self.engine.nets.remove(self)


class _Containers:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def list(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[FakeContainer]:
        return [c for c in self.engine.all if _matches(c.labels, filters) and (all or c.status == "running")]


class _Networks:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def list(self, names: list[str] | None = None, filters: dict[str, Any] | None = None) -> list[FakeNetwork]:
        return [
            n
            for n in self.engine.nets
            if _matches(n.labels, filters) and (names is None or any(part in n.name for part in names))
        ]

    def create(self, name: str, driver: str, labels: dict[str, str]) -> FakeNetwork:
        network = FakeNetwork(self.engine, name, labels)
        self.engine.nets.append(network)
        return network


@dataclass
class FakeEngine:
    all: list[FakeContainer] = field(default_factory=list)
    nets: list[FakeNetwork] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.containers = _Containers(self)
        self.networks = _Networks(self)

    def add(self, name: str, labels: dict[str, str], port: int) -> FakeContainer:
        container = FakeContainer(self, name, labels, port, f"2026-11-29T12:00:{len(self.all):02d}Z")
        self.all.append(container)
        return container
