"""Model servers on the local Docker engine: the model server image (frameworks/modelserver) run hardened, found by
label, waited for until ready, stopped (docs/catalog.md, "Serving").

A server runs non-root, with a read-only root and no capabilities, no credentials in its environment, the version's
folder and the platform's public keys mounted read-only, published on 127.0.0.1 only. It checks the version's model
signature before it loads anything and exits 2 naming what failed; `run_server` then reports its log's tail.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from learnerkit.common.engine import engine
from learnerkit.common.errors import LearnerkitError

SERVER_IMAGE = "learnerkit/modelserver:2.13-cpu-py3.11"
MODEL_LABEL = "io.learnerkit.model"
"""`<tenant>/<name>`: which served model a container is."""
VERSION_LABEL = "io.learnerkit.model.version"
PORT = 8080
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 30


class ServingError(LearnerkitError):
    """A version that could not be served: the server refused it or never got ready (its log's tail is named)."""


@dataclass(frozen=True)
class Served:
    name: str
    version: str
    url: str
    container: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "url": self.url, "container": self.container}


def run_server(tenant: str, name: str, digest: str, folder: Path, keys: Path, image: str = SERVER_IMAGE) -> Served:
    """A server of the pulled version in ``folder`` (the platform's keys in ``keys``), once it answers ready;
    ServingError, nothing left running, when it refuses the version or never gets ready."""
    container = _start(tenant, name, digest, folder, keys, image)
    try:
        _wait_ready(container, name)
    except ServingError:
        remove(container)
        raise
    return described(container, name)


def stop(tenant: str, name: str) -> list[str]:
    """Stop and remove every container serving ``name``; the versions they served (ServingError for none)."""
    found = containers(tenant, name)
    if not found:
        raise ServingError(f"model {name} is not served for tenant {tenant}")
    for container in found:
        remove(container)
    return [str(c.labels.get(VERSION_LABEL)) for c in found]


def served(tenant: str, name: str) -> Served:
    """The running server of ``name`` (the newest, while a roll-over has two); ServingError for none."""
    found = [c for c in containers(tenant, name) if c.status == "running"]
    if not found:
        raise ServingError(f"model {name} is not served for tenant {tenant} (`learnerkit model serve {name}@ALIAS`)")
    newest = max(found, key=lambda c: str(c.attrs.get("Created", "")))
    return described(newest, name)


def read_only_for_all(folder: Path) -> None:
    """A pulled folder (written private) readable by the server's user (UID 1000), writable by nobody."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)


def containers(tenant: str, name: str) -> list[Any]:
    return list(engine().containers.list(all=True, filters={"label": f"{MODEL_LABEL}={tenant}/{name}"}))


def _start(tenant: str, name: str, digest: str, folder: Path, keys: Path, image: str) -> Any:
    key_args = [arg for key in sorted(keys.glob("*.pub")) for arg in ("--public-key", f"/keys/{key.name}")]
    command = ["--model-dir", "/model", *key_args, "--name", name, "--version", digest, "--port", str(PORT)]
    ready = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{PORT}/v2/health/ready', timeout=4)"
    try:
        return engine().containers.run(
            image,
            command=command,
            entrypoint=["/usr/bin/tini", "--", "/opt/learner/venv/bin/python", "/opt/learner/server/serve.py"],
            name=f"lk-model-{tenant}-{name}-{digest.removeprefix('sha256:')[:12]}-{int(time.time() * 1000) % 100000}",
            labels={MODEL_LABEL: f"{tenant}/{name}", VERSION_LABEL: digest},
            detach=True,
            user="1000:0",
            read_only=True,
            tmpfs={"/tmp": "rw,noexec,nosuid,size=64m"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            environment={},
            volumes={str(folder): {"bind": "/model", "mode": "ro"}, str(keys): {"bind": "/keys", "mode": "ro"}},
            ports={f"{PORT}/tcp": ("127.0.0.1", None)},
            healthcheck={"test": ["CMD", "python", "-c", ready], "interval": 10_000_000_000},
            pids_limit=256,
        )
    except docker.errors.ImageNotFound as e:
        raise ServingError(f"no model server image {image}: build it with `learnerkit image build modelserver`") from e


def described(container: Any, name: str) -> Served:
    container.reload()
    bindings = (container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{PORT}/tcp") or []
    port = next((b["HostPort"] for b in bindings if b.get("HostIp") == "127.0.0.1"), None)
    url = f"http://127.0.0.1:{port}" if port else ""
    return Served(name, str(container.labels.get(VERSION_LABEL)), url, str(container.name))


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
