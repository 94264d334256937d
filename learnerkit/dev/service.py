"""What a local service is, as data: the generic manager (:mod:`.detached`) runs any :class:`Service`.

Adding a service (the scheduler, say) means writing one ``Service`` value and listing it in
:mod:`learnerkit.dev.catalog`; nothing in the manager, the state file or the CLI changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from learnerkit.dev.ports import LOOPBACK


@dataclass(frozen=True)
class Launch:
    """What a service's builders and probe see: its folder, its ports and the environment's shared facts."""

    name: str
    folder: Path
    """``<state dir>/<name>``: the service's data and generated config files."""
    ports: Mapping[str, int]
    env: Mapping[str, str] = field(default_factory=dict)
    """The environment's shared variables (the S3 credentials) as ``learnerkit dev env`` prints them."""
    scrape_targets: tuple[str, ...] = ()
    """``host:port/path`` of every running service that serves Prometheus metrics (``https://host:port/path``
    where it serves them over TLS)."""
    settings: Mapping[str, str] = field(default_factory=dict)
    """The caller's variables the service's process gets beside the clean environment (:attr:`Service.settings`)."""


ArgvBuilder = Callable[[Launch], list[str]]
Probe = Callable[[Launch], bool]
"""True when the service answers a real request (never just an open port); must not raise when it is down."""
Hook = Callable[[Launch], None]
Exports = Callable[[Launch], dict[str, str]]
Settings = Callable[[Mapping[str, str]], dict[str, str]]
"""The caller's environment -> the variables a service's process takes from it (its settings)."""


def _nothing(launch: Launch) -> None:
    """A hook that does nothing."""


def _no_exports(launch: Launch) -> dict[str, str]:
    return {}


def _no_settings(environ: Mapping[str, str]) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Service:
    name: str
    ports: Mapping[str, int]
    """Port name -> preferred number; a taken preferred port is replaced by a free one."""
    main_port: str
    """The port (name) of the service's HTTP endpoint."""
    argv: ArgvBuilder
    probe: Probe
    prepare: Hook = _nothing
    """Writes the service's config files; runs before a start and on every ``up``, so it must be idempotent."""
    on_ready: Hook = _nothing
    """Runs after the probe passed and on every ``up`` (create buckets, say); idempotent."""
    exports: Exports = _no_exports
    """Variables for ``learnerkit dev env``."""
    settings: Settings = _no_settings
    """Which of the caller's variables reach the process (every other one is left out: none of the caller's
    ETCD_* or AWS_* variables reach a server)."""
    metrics_path: str | None = None
    """Where the main port serves Prometheus metrics; such services become Prometheus' scrape targets."""
    optional: bool = False
    """Started only when asked for (``--with-NAME``), then kept on later ``up`` calls."""
    scheme: str = "http"
    """``https`` for a service that serves its main port over TLS."""
    start_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0

    def endpoint(self, ports: Mapping[str, int]) -> str:
        return f"{self.scheme}://{LOOPBACK}:{ports[self.main_port]}"

    def scrape_target(self, ports: Mapping[str, int]) -> str | None:
        if self.metrics_path is None:
            return None
        target = f"{LOOPBACK}:{ports[self.main_port]}{self.metrics_path}"
        return target if self.scheme == "http" else f"{self.scheme}://{target}"
