"""``state.json``: which services run (pid, start time, ports, endpoint), written atomically.

A reader (``status``, ``env``, another ``up``) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from controller_sidecar.atomicfile import write_json_atomic
from learnerkit.common.errors import ConfigError

STATE_VERSION = 1


@dataclass(frozen=True)
class ServiceRecord:
    name: str
    pid: int
    start_ticks: int | None
    """The process's start time (``/proc/<pid>/stat``): tells our process from a reused pid."""
    ports: dict[str, int]
    endpoint: str
    log: str
    scrape_target: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    """The caller's variables it was started with (:attr:`learnerkit.dev.service.Service.settings`)."""


@dataclass(frozen=True)
class DevState:
    services: dict[str, ServiceRecord] = field(default_factory=dict)

    @property
    def scrape_targets(self) -> tuple[str, ...]:
        return tuple(r.scrape_target for r in self.services.values() if r.scrape_target is not None)

    def with_record(self, record: ServiceRecord) -> DevState:
        return replace(self, services={**self.services, record.name: record})

    def without(self, name: str) -> DevState:
        return replace(self, services={k: v for k, v in self.services.items() if k != name})

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "services": {name: asdict(record) for name, record in self.services.items()},
            "scrape_targets": list(self.scrape_targets),
        }

    @classmethod
    def from_json(cls, document: Any, where: Path) -> DevState:
        try:
            if document.get("version") != STATE_VERSION:
                raise ConfigError(f"{where}: state version {document.get('version')!r}, expected {STATE_VERSION}")
            services = {
                name: ServiceRecord(
                    name=name,
                    pid=int(raw["pid"]),
                    start_ticks=None if raw.get("start_ticks") is None else int(raw["start_ticks"]),
                    ports={str(k): int(v) for k, v in raw["ports"].items()},
                    endpoint=str(raw["endpoint"]),
                    log=str(raw["log"]),
                    scrape_target=raw.get("scrape_target"),
                    settings={str(k): str(v) for k, v in raw.get("settings", {}).items()},
                )
                for name, raw in document["services"].items()
            }
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{where}: not a learnerkit services state file ({e!r}); remove it and run up") from e
        return cls(services=services)


def load_state(path: Path) -> DevState:
    """The state in ``path``; an empty state when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return DevState()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not JSON ({e}); remove it and run up") from e
    return DevState.from_json(document, path)


def save_state(path: Path, state: DevState) -> None:
    """Write ``state`` atomically; an empty state removes the file."""
    if not state.services:
        path.unlink(missing_ok=True)
        return
    write_json_atomic(path, state.to_json())
