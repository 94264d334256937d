"""The developer's local services: ``learnerkit dev up|down|status|env`` over the detached-process manager.

Everything lives in one folder (default ``.learnerkit/services``): ``state.json`` (pid, start time, ports
of each running service), ``<name>.log``, ``<name>/`` (data, generated config) and ``credentials.env``.
A lock file serialises concurrent ``up`` and ``down`` calls.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from learnerkit.dev.catalog import DEV_SERVICES
from learnerkit.dev.credentials import ensure_credentials, read_credentials
from learnerkit.dev.detached import running, start_detached, stop_detached
from learnerkit.dev.errors import ServiceError
from learnerkit.dev.polling import poll_until
from learnerkit.dev.ports import choose_ports
from learnerkit.dev.service import Launch, Service
from learnerkit.dev.state import DevState, ServiceRecord, load_state, save_state

DEFAULT_FOLDER = Path(".learnerkit/services")
FOLDER_ENV = "LEARNERKIT_SERVICES_DIR"
DEFAULT_STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    state: str
    """``running``, ``stale`` (its pid is gone or belongs to another process) or ``stopped``."""
    healthy: bool
    pid: int | None = None
    endpoint: str | None = None
    log: str | None = None
    action: str | None = None
    """What ``up`` or ``down`` did: started, restarted, already running, stopped, was not running."""
    settings: dict[str, str] = field(default_factory=dict)
    """The caller's variables it runs with (the scheduler's ``LEARNERKIT_*`` settings)."""


def _status(record: ServiceRecord, *, healthy: bool, action: str | None = None) -> ServiceStatus:
    return ServiceStatus(
        record.name, "running", healthy, record.pid, record.endpoint, record.log, action, dict(record.settings)
    )


class DevServices:
    def __init__(
        self, folder: Path, services: tuple[Service, ...] = DEV_SERVICES, caller: Mapping[str, str] | None = None
    ) -> None:
        self.folder = folder
        self.services = services
        self.caller = dict(os.environ) if caller is None else dict(caller)
        """The caller's environment, whose settings a service takes (:attr:`Service.settings`)."""
        self.state_path = folder / "state.json"
        self.credentials_path = folder / "credentials.env"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _launch(self, service: Service, ports: Mapping[str, int], env: Mapping[str, str], state: DevState) -> Launch:
        """What ``service`` sees: its ports, the credentials and what the services started before it export."""
        targets = tuple(r.scrape_target for r in state.services.values() if r.scrape_target and r.name != service.name)
        shared = dict(env)
        for other in self.services:
            if other.name == service.name:
                break
            record = state.services.get(other.name)
            if record is not None:
                shared.update(
                    other.exports(Launch(other.name, self.folder / other.name, dict(record.ports), dict(env)))
                )
        settings = service.settings(self.caller)
        return Launch(service.name, self.folder / service.name, dict(ports), shared, targets, settings)

    def _service(self, name: str) -> Service | None:
        return next((s for s in self.services if s.name == name), None)

    def up(self, *, with_optional: Collection[str] = (), any_port: bool = False) -> list[ServiceStatus]:
        """Start what does not run; leave what answers alone; restart services whose pid is stale."""
        results = []
        with self._locked():
            env = ensure_credentials(self.credentials_path)
            state = load_state(self.state_path)
            for service in self.services:
                record = state.services.get(service.name)
                if service.optional and record is None and service.name not in with_optional:
                    continue
                if record is not None and running(record):
                    self._check_running(service, record, env, state)
                    action = "already running"
                    if service.settings(self.caller) != record.settings:
                        action = "already running, with other settings: `learnerkit dev down`, then up, applies these"
                    results.append(_status(record, healthy=True, action=action))
                    continue
                # A restarted service keeps its recorded ports where they are free, --any-port or not.
                ports = choose_ports(service.ports, any_port=any_port) if record is None else choose_ports(record.ports)
                launch = self._launch(service, ports, env, state)
                record_new = start_detached(service, launch, self.folder / f"{service.name}.log")
                state = state.with_record(record_new)
                save_state(self.state_path, state)
                action = "started" if record is None else f"restarted (pid {record.pid} was stale)"
                results.append(_status(record_new, healthy=True, action=action))
        return results

    def _check_running(self, service: Service, record: ServiceRecord, env: Mapping[str, str], state: DevState) -> None:
        launch = self._launch(service, record.ports, env, state)
        service.prepare(launch)
        if not poll_until(lambda: service.probe(launch), service.start_timeout_s, 0.1):
            raise ServiceError(
                f"{service.name} (pid {record.pid}) runs but does not answer at {record.endpoint}; see "
                f"{record.log}, or stop it with `learnerkit dev down`"
            )
        service.on_ready(launch)

    def status(self) -> list[ServiceStatus]:
        state = load_state(self.state_path)
        env = read_credentials(self.credentials_path) or {}
        results = []
        for service in self.services:
            record = state.services.get(service.name)
            if record is None:
                if not service.optional:
                    results.append(ServiceStatus(service.name, "stopped", healthy=False))
                continue
            if not running(record):
                results.append(ServiceStatus(record.name, "stale", False, record.pid, record.endpoint, record.log))
                continue
            healthy = service.probe(self._launch(service, record.ports, env, state))
            results.append(_status(record, healthy=healthy))
        return results

    def environment(self) -> dict[str, str]:
        """The variables a shell (or boto3, or the etcd client) needs to reach the running services."""
        state = load_state(self.state_path)
        credentials = read_credentials(self.credentials_path)
        live = [(s, state.services[s.name]) for s in self.services if s.name in state.services]
        live = [(s, r) for s, r in live if running(r)]
        if not live or credentials is None:
            raise ServiceError(f"no dev services run (state: {self.state_path}): run `learnerkit dev up`")
        variables: dict[str, str] = {}
        for service, record in live:
            variables.update(service.exports(self._launch(service, record.ports, credentials, state)))
        variables.update(credentials)
        return variables

    def _stop_order(self, state: DevState) -> list[ServiceRecord]:
        """The reverse of the start order; records of services no longer in the catalog first."""
        known = [s.name for s in reversed(self.services)]
        unknown = [name for name in state.services if name not in known]
        return [state.services[name] for name in (*unknown, *known) if name in state.services]

    def down(self, *, purge: bool = False) -> list[ServiceStatus]:
        """Stop every recorded service (the last started first) and remove the state; ``purge``: the data too."""
        results = []
        with self._locked():
            state = load_state(self.state_path)
            for record in self._stop_order(state):
                service = self._service(record.name)
                timeout = service.stop_timeout_s if service is not None else DEFAULT_STOP_TIMEOUT_S
                stopped = stop_detached(record, timeout)
                action = "stopped" if stopped else "was not running"
                results.append(
                    ServiceStatus(record.name, "stopped", False, record.pid, record.endpoint, record.log, action)
                )
                state = state.without(record.name)
                save_state(self.state_path, state)
            if purge:
                for child in self.folder.iterdir():
                    if child.name != ".lock":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
        return results
