"""Model servers on the local Docker engine: the model server image (frameworks/modelserver) run hardened, found by
label, waited for until ready, stopped; and each endpoint's front (`modelfront`), its stable address, that switches
to a new server once it is ready and drains the old one (docs/catalog.md, "Serving").

An endpoint is one served reference, NAME@ALIAS or NAME@VERSION: `production` and `candidate` of one model are two,
each with its own front, network and servers, so rolling one over never touches the other. What is served is only
on the engine (labels), never in the scheduler: a scheduler's restart changes nothing of it.

A server runs non-root, with a read-only root and no capabilities, no credentials in its environment, the version's
folder and the platform's public keys mounted read-only, published on 127.0.0.1 only. It checks the version's model
signature before it loads anything and exits 2 naming what failed; `run_server` then reports its log's tail.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.engine import engine
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.backends import modelfront

SERVER_IMAGE = "learnerkit/modelserver:2.13-cpu-py3.11"
MODEL_LABEL = "io.learnerkit.model"
"""`<tenant>/<name>`: which served model a container is."""
VERSION_LABEL = "io.learnerkit.model.version"
FRONT_LABEL = "io.learnerkit.model.front"
"""`<tenant>/<name>`: which served model's front (or network) a container is (no MODEL_LABEL: it serves no version)."""
SERVED_LABEL = "io.learnerkit.model.served"
"""`<tenant>/<name>@<alias or version>`: the endpoint a server, front or network belongs to."""
PORT = 8080
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 30


class ServingError(LearnerkitError):
    """A version that could not be served: the server refused it or never got ready (its log's tail is named)."""


@dataclass(frozen=True)
class Endpoint:
    """One served reference of a tenant's model: ``pinned`` is the alias or the version (``sha256:...``)."""

    tenant: str
    name: str
    pinned: str

    @property
    def reference(self) -> str:
        return f"{self.name}@{self.pinned}"

    @property
    def alias(self) -> str | None:
        return None if self.pinned.startswith("sha256:") else self.pinned

    @property
    def label(self) -> str:
        return f"{self.tenant}/{self.reference}"

    @property
    def slug(self) -> str:
        """Readable and unique: name and alias (or the version's first 12 hex digits), cut to 24 characters, and 8
        hex digits of the whole label (names, aliases and tenants all may hold "-": joined, they could collide)."""
        short = self.pinned.removeprefix("sha256:")[:12] if self.alias is None else self.pinned
        return f"{self.name}-{short}"[:24].rstrip("-._") + "-" + hashlib.sha256(self.label.encode()).hexdigest()[:8]

    @property
    def front_container(self) -> str:
        return f"lk-front-{self.slug}"

    @property
    def network_name(self) -> str:
        return f"lk-model-{self.slug}"

    def server_container(self, digest: str) -> str:
        """A server of ``digest``: its start's milliseconds too, as a removed one's name may linger a moment."""
        return f"lk-model-{self.slug}-{digest.removeprefix('sha256:')[:12]}-{int(time.time() * 1000) % 100000}"


def front_labels(endpoint: Endpoint) -> dict[str, str]:
    """The labels of the endpoint's front and network."""
    return {FRONT_LABEL: f"{endpoint.tenant}/{endpoint.name}", SERVED_LABEL: endpoint.label}


def server_labels(endpoint: Endpoint, digest: str) -> dict[str, str]:
    return {MODEL_LABEL: f"{endpoint.tenant}/{endpoint.name}", VERSION_LABEL: digest, SERVED_LABEL: endpoint.label}


@dataclass(frozen=True)
class Served:
    name: str
    version: str
    url: str
    """The endpoint's stable address: its front's (the server's own where it has none)."""
    container: str
    """The server's container."""
    front: str = ""
    """The front's container."""
    pinned: str = ""
    """The alias or version served at ``url`` ("" for a server started alone, `run_server`)."""

    @property
    def reference(self) -> str:
        return f"{self.name}@{self.pinned}" if self.pinned else self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "alias": None if not self.pinned or self.pinned.startswith("sha256:") else self.pinned,
            "reference": self.reference,
            "version": self.version,
            "url": self.url,
            "container": self.container,
            "front": self.front,
        }


def run_server(
    tenant: str, name: str, digest: str, folder: Path, keys: Path, image: str = SERVER_IMAGE, network: str | None = None
) -> Served:
    """A server of the pulled version in ``folder`` (the platform's keys in ``keys``), once it answers ready;
    ServingError, nothing left running, when it refuses the version or never gets ready."""
    container = _start(Endpoint(tenant, name, digest), digest, folder, keys, image, network)
    try:
        _wait_ready(container, name)
    except ServingError:
        remove(container)
        raise
    return described(container, name)


def roll_over(
    endpoint: Endpoint, digest: str, folder: Path, keys: Path, image: str, control: Path, port: int | None
) -> Served:
    """``endpoint`` served at its front's address by a server of ``digest``: started (or kept, where it runs), the
    front switched to it once it answers ready, then every server of another version stopped once the front has
    no request in flight to it. A server started here is removed again when the switch fails. The name's other
    endpoints are not touched."""
    name = endpoint.name
    servers = containers(endpoint)
    old = [c for c in servers if c.labels.get(VERSION_LABEL) != digest]
    same = [c for c in servers if c.labels.get(VERSION_LABEL) == digest and c.status == "running"]
    running_front = front(endpoint)
    if same and running_front is not None and not old and port in (None, _front_port(running_front)):
        return described(same[0], name, running_front)  # another port: start_front names the one it has
    started = None if same else _start(endpoint, digest, folder, keys, image, network(endpoint))
    server = same[0] if started is None else started
    try:
        if started is not None:
            _wait_ready(started, name)
        own = described(server, name)
        front_container = start_front(endpoint, control, own, image, port)
        switch(front_container, endpoint.reference, own, [described(c, name) for c in old])
    except ServingError:
        if started is not None:
            if old:
                name_upstream(control, described(old[-1], name))
            remove(started)
        if not old and running_front is None:  # the endpoint was not served: nothing of it is left
            for container in _fronts(endpoint):
                remove(container)
            _remove_networks({SERVED_LABEL: endpoint.label})
        raise
    for previous in old:
        remove(previous)
    return described(server, name, front_container)


def stop(tenant: str, name: str, pinned: str | None = None) -> list[Served]:
    """Stop and remove the front of the endpoint ``name@pinned`` (every endpoint of ``name`` for None; a front
    finishes the requests it is forwarding), then its servers, then its network; what each served (ServingError
    naming the endpoint, and what is served, for none)."""
    if pinned is None:
        found = list(engine().containers.list(all=True, filters={"label": f"{MODEL_LABEL}={tenant}/{name}"}))
        fronts = list(engine().containers.list(all=True, filters={"label": f"{FRONT_LABEL}={tenant}/{name}"}))
        if not found and not fronts:
            raise ServingError(f"model {name} is not served for tenant {tenant}")
    else:
        endpoint = Endpoint(tenant, name, pinned)
        found, fronts = containers(endpoint), _fronts(endpoint)
        if not found and not fronts:
            raise ServingError(f"{endpoint.reference} is not served for tenant {tenant}{_others(tenant, name)}")
    stopped = sorted((described(c, name) for c in found), key=lambda s: s.reference)
    for container in fronts:
        remove(container)
    for container in found:
        remove(container)
    _remove_networks(
        {FRONT_LABEL: f"{tenant}/{name}"} if pinned is None else {SERVED_LABEL: f"{tenant}/{name}@{pinned}"}
    )
    return stopped


def served(endpoint: Endpoint) -> Served:
    """The running server of ``endpoint`` at its front's address; ServingError, naming what of the name is
    served, for none."""
    found = _running(endpoint)
    if found is None:
        raise ServingError(
            f"{endpoint.reference} is not served for tenant {endpoint.tenant}{_others(endpoint.tenant, endpoint.name)}"
            f" (`learnerkit model serve {endpoint.reference}`)"
        )
    return found


def served_endpoints(tenant: str, name: str | None = None) -> list[Served]:
    """Every endpoint of the tenant's models (of ``name`` only, where given) with a running server, by reference."""
    model = f"{tenant}/{name}" if name is not None else None
    endpoints = set()
    for container in engine().containers.list(filters={"label": SERVED_LABEL}):
        owner, _, pinned = str(container.labels.get(SERVED_LABEL, "")).partition("@")
        if MODEL_LABEL in container.labels and owner.startswith(f"{tenant}/") and model in (None, owner):
            endpoints.add(Endpoint(tenant, owner.removeprefix(f"{tenant}/"), pinned))
    running = [_running(e) for e in endpoints]  # None: its server exited since the list
    return sorted((s for s in running if s is not None), key=lambda s: s.reference)


def _running(endpoint: Endpoint) -> Served | None:
    """The running server of ``endpoint`` (the newest, while a roll-over has two) at its front's address."""
    found = [c for c in containers(endpoint) if c.status == "running"]
    if not found:
        return None
    newest = max(found, key=lambda c: str(c.attrs.get("Created", "")))
    return described(newest, endpoint.name, front(endpoint))


def _others(tenant: str, name: str) -> str:
    """`` (served: NAME@A, NAME@B)``: the name's endpoints that are served, for an error about another one."""
    others = [s.reference for s in served_endpoints(tenant, name)]
    return f" (served: {', '.join(others)})" if others else ""


def network(endpoint: Endpoint) -> str:
    """The endpoint's own Docker network (its front and servers), made once."""
    wanted = endpoint.network_name
    if not [n for n in engine().networks.list(names=[wanted]) if n.name == wanted]:
        engine().networks.create(wanted, driver="bridge", labels=front_labels(endpoint))
    return wanted


def _remove_networks(labels: dict[str, str]) -> None:
    """The networks with all of ``labels`` (once the containers on them are gone)."""
    for found in engine().networks.list(filters={"label": [f"{k}={v}" for k, v in labels.items()]}):
        found.remove()


def upstream_url(server: Served) -> str:
    """The server as its front reaches it: by container name on the name's network."""
    return f"http://{server.container}:{PORT}"


def front(endpoint: Endpoint) -> Any | None:
    """The running front of ``endpoint``, if any."""
    running = [c for c in _fronts(endpoint) if c.status == "running"]
    return running[0] if running else None


def start_front(endpoint: Endpoint, control: Path, server: Served, image: str, port: int | None) -> Any:
    """The front of ``endpoint``, ``server`` named in its control folder; a front that runs already is kept (its
    port is the endpoint's address), one that stopped is started again on the port it had. ``port``: the host
    port of a new front (None: one Docker picks)."""
    name_upstream(control, server)
    running = front(endpoint)
    reference = endpoint.reference
    if running is not None:
        had = _front_port(running)
        if port is not None and had != port:
            raise ServingError(
                f"{reference} is served at http://127.0.0.1:{had}: `learnerkit model stop {reference}` to change it"
            )
        return running
    for stopped in _fronts(endpoint):
        port = port or _front_port(stopped)
        stopped.remove(force=True)
    try:
        container = engine().containers.run(
            image,
            command=["--control", "/control", "--name", endpoint.name, "--port", str(PORT)],
            entrypoint=["/usr/bin/tini", "--", "/opt/learner/venv/bin/python", "/front/modelfront.py"],
            name=endpoint.front_container,
            labels=front_labels(endpoint),
            detach=True,
            network=network(endpoint),
            **_hardened(),
            volumes={
                modelfront.__file__: {"bind": "/front/modelfront.py", "mode": "ro"},
                str(control): {"bind": "/control", "mode": "ro"},
            },
            ports={f"{PORT}/tcp": ("127.0.0.1", port)},
        )
    except docker.errors.APIError as e:
        raise ServingError(f"the front of {reference} did not start: {e.explanation or e}") from e
    return container


def name_upstream(control: Path, server: Served) -> None:
    """The control file that tells the front which server is current (atomic: the front reads old or new)."""
    write_atomic(
        control / modelfront.CONTROL_FILE,
        json.dumps({"url": upstream_url(server), "version": server.version}).encode(),
        durable=False,
    )
    control.chmod(0o755)  # the front runs as UID 1000, not necessarily the host user


def switch(front_container: Any, reference: str, server: Served, old: list[Served]) -> None:
    """Until the front routes to ``server`` and has no request in flight to any of ``old``: then they can stop
    without dropping one. ServingError with the front's log when it exits or the deadline passes."""
    wanted, leaving = upstream_url(server), {upstream_url(o) for o in old}
    deadline = time.monotonic() + READY_TIMEOUT
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        front_container.reload()
        if front_container.status in ("exited", "dead"):
            tail = front_container.logs(tail=20).decode("utf-8", "replace").strip()
            raise ServingError(f"the front of {reference} exited: {tail}")
        url = _published(front_container)
        if url:
            try:
                with urllib.request.urlopen(f"{url}{modelfront.STATUS_PATH}", timeout=2) as answer:  # noqa: S310
                    status = json.loads(answer.read())
            except (urllib.error.URLError, OSError, ValueError):
                status = {}
            current = (status.get("upstream") or {}).get("url")
            if current == wanted and not leaving & set(status.get("in_flight", {})):
                return
        time.sleep(0.05)
    raise ServingError(f"the front of {reference} did not switch to {wanted} within {READY_TIMEOUT:.0f} s: {status}")


def _fronts(endpoint: Endpoint) -> list[Any]:
    """The fronts of ``endpoint``, running or not."""
    labels = [f"{k}={v}" for k, v in front_labels(endpoint).items()]
    return list(engine().containers.list(all=True, filters={"label": labels}))


def _front_port(container: Any) -> int | None:
    """The host port the front has (running) or was given (stopped; None: Docker picked one)."""
    published = _published(container)
    if published:
        return int(published.rsplit(":", 1)[1])
    bindings = (container.attrs["HostConfig"].get("PortBindings") or {}).get(f"{PORT}/tcp") or []
    host = bindings[0].get("HostPort") if bindings else ""
    return int(host) if host else None


def read_only_for_all(folder: Path) -> None:
    """A pulled folder (written private) readable by the server's user (UID 1000), writable by nobody."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)


def containers(endpoint: Endpoint) -> list[Any]:
    """The servers of ``endpoint``, running or not."""
    labels = [f"{MODEL_LABEL}={endpoint.tenant}/{endpoint.name}", f"{SERVED_LABEL}={endpoint.label}"]
    return list(engine().containers.list(all=True, filters={"label": labels}))


def _hardened() -> dict[str, Any]:
    """What every server and front runs with: UID 1000, a read-only root, no capabilities, no environment."""
    return {
        "user": "1000:0",
        "read_only": True,
        "tmpfs": {"/tmp": "rw,noexec,nosuid,size=64m"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "environment": {},
        "pids_limit": 256,
    }


def _start(endpoint: Endpoint, digest: str, folder: Path, keys: Path, image: str, network: str | None) -> Any:
    name = endpoint.name
    key_args = [arg for key in sorted(keys.glob("*.pub")) for arg in ("--public-key", f"/keys/{key.name}")]
    command = ["--model-dir", "/model", *key_args, "--name", name, "--version", digest, "--port", str(PORT)]
    ready = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{PORT}/v2/health/ready', timeout=4)"
    try:
        return engine().containers.run(
            image,
            command=command,
            entrypoint=["/usr/bin/tini", "--", "/opt/learner/venv/bin/python", "/opt/learner/server/serve.py"],
            name=endpoint.server_container(digest),
            labels=server_labels(endpoint, digest),
            detach=True,
            **_hardened(),
            **({"network": network} if network else {}),
            volumes={str(folder): {"bind": "/model", "mode": "ro"}, str(keys): {"bind": "/keys", "mode": "ro"}},
            ports={f"{PORT}/tcp": ("127.0.0.1", None)},
            healthcheck={"test": ["CMD", "python", "-c", ready], "interval": 10_000_000_000},
        )
    except docker.errors.ImageNotFound as e:
        raise ServingError(f"no model server image {image}: build it with `learnerkit image build modelserver`") from e


def described(container: Any, name: str, front_container: Any | None = None) -> Served:
    """The server ``container`` at the address of ``front_container`` (its own without one)."""
    url = _published(front_container) if front_container is not None else _published(container)
    front_name = str(front_container.name) if front_container is not None else ""
    pinned = str(container.labels.get(SERVED_LABEL, "")).partition("@")[2]
    return Served(name, str(container.labels.get(VERSION_LABEL)), url, str(container.name), front_name, pinned)


def server_url(server: Served) -> str:
    """The server's own address (behind its front: for a benchmark of the front's cost)."""
    return _published(engine().containers.get(server.container))


def _published(container: Any) -> str:
    """``http://127.0.0.1:PORT`` where the container's port is published ("" before it is)."""
    container.reload()
    bindings = (container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{PORT}/tcp") or []
    port = next((b["HostPort"] for b in bindings if b.get("HostIp") == "127.0.0.1"), None)
    return f"http://127.0.0.1:{port}" if port else ""


def _wait_ready(container: Any, name: str) -> None:
    """Until `/v2/models/{name}/ready` answers 200; ServingError with the log's tail once the server exits (a
    refused signature) or the deadline passes."""
    deadline = time.monotonic() + READY_TIMEOUT
    url = ""
    while time.monotonic() < deadline:
        container.reload()
        if container.status in ("exited", "dead"):
            tail = container.logs(tail=20).decode("utf-8", "replace").strip()
            raise ServingError(f"the model server of {name} exited {container.attrs['State']['ExitCode']}: {tail}")
        url = url or described(container, name).url
        if url:
            try:
                with urllib.request.urlopen(f"{url}/v2/models/{name}/ready", timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
        time.sleep(0.2)
    raise ServingError(f"the model server of {name} was not ready within {READY_TIMEOUT:.0f} s")


def remove(container: Any) -> None:
    try:
        container.stop(timeout=STOP_TIMEOUT)
        container.remove(force=True)
    except docker.errors.NotFound:
        return
