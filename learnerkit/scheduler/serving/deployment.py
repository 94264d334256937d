"""`model serve`: a catalog version served by the model server image on the local Docker engine (docs/catalog.md).

`serve` runs the model server image only where it passed the build tool's test and scan gates on this host
(`image test`, `image scan`: the check `image publish` and the scheduler's image gate make), by the image ID the
gate checked. It pulls the version (every blob checked against its digest), checks its weights signature with the
platform's keys as an alias move does, and only then starts the server (`backends.modelservers`: hardened). The server
checks the signature again before it loads anything (the folder could change between the two). Each served
reference (NAME@ALIAS, NAME@VERSION: an endpoint) has one address, its front's (`backends.modelfront`), kept while
it is served: serving the reference again rolls that endpoint over (the new server answers ready, the front switches
to it, the requests in flight to the old one finish, then the old one stops, draining too), and only that one.

Serving and stopping a name on this host hold one lock file per name (`flock`): two `serve`s of one endpoint at once
would race for its front's container name; the second says it waits, and gives up after :data:`LOCK_WAIT_S`.
The catalog's etcd lock (`hold_model`) is not taken: it orders alias moves, and `serve` moves none; it resolves the
alias once, so a move made meanwhile is served by the next `serve`.
With ``servers`` (`--backend kubernetes`) the version is served on the cluster instead
(`backends.k8s_modelservers`): a pod per version, the files sent into it, a Service as the name's one address (on
the cluster a name has one endpoint; serving another reference of it rolls it over).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import IO

from securesystemslib.signer import Key

from learnerkit.common.engineimages import EngineError
from learnerkit.scheduler.backends import modelservers
from learnerkit.scheduler.backends.k8s_cluster import connect
from learnerkit.scheduler.backends.k8s_modelservers import KubernetesModelServers as KubernetesModelServers
from learnerkit.scheduler.backends.modelservers import (
    SERVER_IMAGE as SERVER_IMAGE,
)
from learnerkit.scheduler.backends.modelservers import (
    Endpoint,
    Served,
    ServingError,
    read_only_for_all,
    roll_over,
)
from learnerkit.scheduler.catalog.errors import RefusedError
from learnerkit.scheduler.catalog.names import Reference
from learnerkit.scheduler.catalog.proof import WEIGHTS
from learnerkit.scheduler.catalog.service import check_version, pull
from learnerkit.scheduler.catalog.versions import Store, resolve
from learnerkit_build.publish.push import PublishRefused, check_gates

LOGGER = logging.getLogger(__name__)
LOCK_WAIT_S = 900.0
"""How long a `serve` or `stop` waits for another of the same name on this host (a rollover waits for the old
server's requests to finish, and a pull for the version's blobs) before it gives up."""
LOCK_POLL_S = 0.2


def serve(
    store: Store,
    reference: str,
    keys: Sequence[Key],
    key_files: Sequence[Path],
    home: Path,
    image: str = SERVER_IMAGE,
    port: int | None = None,
    servers: KubernetesModelServers | None = None,
) -> Served:
    """Serve ``reference`` (NAME@ALIAS or NAME@VERSION) at its endpoint's address (``port``: its host port, where
    the endpoint is not served yet; None: one Docker picks); the version's files are kept under ``home``."""
    ref = Reference.parse(reference)
    endpoint = Endpoint(store.tenant, ref.name, ref.pinned())
    digest = resolve(store, ref)
    proof = check_version(store, ref.name, digest, keys)
    if proof.failed_checks(WEIGHTS):
        reasons = [r for r in proof.reasons() if r.startswith(WEIGHTS)]
        raise RefusedError(f"{ref.name}@{digest} is not served: {'; '.join(reasons)}", [WEIGHTS])
    try:
        image_id = str(check_gates(image).image_id)
    except PublishRefused as e:
        raise ServingError(f"the model server image is not served from: {e}") from e
    with _held(home, store.tenant, ref.name):
        folder = _pulled(store, ref.name, digest, home)
        keys_folder = _public_keys(key_files, folder.parent / f"{folder.name}.keys")
        if servers is not None:
            served = servers.roll_over(store.tenant, ref.name, digest, folder, keys_folder, image, image_id)
            return replace(served, pinned=ref.pinned())
        return roll_over(endpoint, digest, folder, keys_folder, image_id, _control(home, endpoint), port)


def served(tenant: str, reference: str) -> Served:
    """The endpoint of ``reference`` (NAME@ALIAS, NAME@VERSION) on this engine; ServingError naming what of the
    name is served where it is not."""
    ref = Reference.parse(reference)
    return modelservers.served(Endpoint(tenant, ref.name, ref.pinned()))


def stop(home: Path, tenant: str, reference: str) -> list[Served]:
    """Stop the endpoint of NAME@ALIAS or NAME@VERSION, or every endpoint of a bare NAME, and remove what `serve`
    kept of it under ``home`` (a pulled version only once no endpoint of the name serves it)."""
    ref = Reference.parse(reference)
    pinned = None if ref.version is None and ref.alias is None else ref.pinned()
    with _held(home, tenant, ref.name):
        stopped = modelservers.stop(tenant, ref.name, pinned)
        if pinned is None:
            forget(home, tenant, ref.name)
        else:
            _forget_endpoint(home, Endpoint(tenant, ref.name, pinned))
    return stopped


def stop_on_cluster(servers: KubernetesModelServers, home: Path, tenant: str, reference: str) -> list[Served]:
    """Stop the name's one endpoint on the cluster, whichever reference of the name is given, until nothing of it
    is left there, and remove what `serve` kept of it under ``home``."""
    name = Reference.parse(reference).name
    versions = servers.stop(tenant, name)
    forget(home, tenant, name)
    return [Served(name, version, "", "") for version in versions]


def served_here(tenant: str, name: str | None = None) -> list[Served] | None:
    """The tenant's endpoints (of ``name``, where given) on this host's engine; None where no engine answers."""
    try:
        return modelservers.served_endpoints(tenant, name)
    except EngineError:
        return None


def _control(home: Path, endpoint: Endpoint) -> Path:
    """The endpoint's front's control folder (the alias, or the version as its folder is named)."""
    return home / endpoint.tenant / endpoint.name / "fronts" / endpoint.pinned.replace(":", "-")


@contextmanager
def _held(home: Path, tenant: str, name: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """The name's serving lock on this host, held while the block runs: a second `serve` or `stop` says that it
    waits, and gives up after ``wait_s`` with a ServingError naming the lock file. The file stays (it is only
    ever locked, never read: its presence holds nothing)."""
    folder = home / tenant
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".{name}.lock"
    with path.open("a") as lock:
        if not _locked(lock):
            LOGGER.warning("%s: another `model serve` or `model stop` of it runs on this host: waiting for it", name)
            deadline = time.monotonic() + wait_s
            while not _locked(lock):
                if time.monotonic() >= deadline:
                    raise ServingError(
                        f"{name}: another `model serve` or `model stop` of it on this host still holds {path} after "
                        f"{wait_s:g}s; let it finish or end it (`lslocks` names its process), then try again"
                    )
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _locked(lock: IO[str]) -> bool:
    """Whether this process now holds ``lock`` (taken at once, or not at all)."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def cluster_servers(namespace: str) -> KubernetesModelServers:
    """The served models in ``namespace`` of the cluster $KUBECONFIG names (else ~/.kube/config, else the
    in-cluster account); read now, not when the client library was imported."""
    return KubernetesModelServers(connect(os.environ.get("KUBECONFIG")), namespace)


def _pulled(store: Store, name: str, digest: str, home: Path) -> Path:
    """The version's folder under ``home`` (pulled once: a version is immutable, and its server verifies it)."""
    folder = home / store.tenant / name / digest.replace(":", "-")
    if not folder.is_dir():
        pull(store, f"{name}@{digest}", folder)
        read_only_for_all(folder)
    return folder


def _public_keys(files: Sequence[Path], folder: Path) -> Path:
    """The platform's public keys, copied beside the version to be mounted read-only (no private key goes there)."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        data = path.read_bytes()
        (folder / f"{hashlib.sha256(data).hexdigest()[:16]}.pub").write_bytes(data)
    return folder


def forget(home: Path, tenant: str, name: str) -> None:
    """The pulled versions of ``name`` under ``home``, removed once it is stopped (they are read-only)."""
    _remove(home / tenant / name)


def _forget_endpoint(home: Path, endpoint: Endpoint) -> None:
    """The stopped endpoint's control folder, and each pulled version no endpoint of the name serves any more."""
    _remove(_control(home, endpoint))
    kept = {s.version.replace(":", "-") for s in modelservers.served_endpoints(endpoint.tenant, endpoint.name)}
    for folder in (home / endpoint.tenant / endpoint.name).glob("sha256-*"):
        if folder.name.removesuffix(".keys") not in kept:
            _remove(folder)


def _remove(folder: Path) -> None:
    if folder.is_dir():
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(folder)
