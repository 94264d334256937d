"""`model serve`: a catalog version served by the model server image on the local Docker engine (docs/catalog.md).

`serve` runs the model server image only where it passed the build tool's test and scan gates on this host
(`image test`, `image scan`: the check `image publish` and the scheduler's image gate make), by the image ID the
gate checked. It pulls the version (every blob checked against its digest), checks its weights signature with the
platform's keys as an alias move does, and only then starts the server (`backends.modelservers`: hardened). The server
checks the signature again before it loads anything (the folder could change between the two). A served name has
one address, its front's (`backends.modelfront`), kept while it is served: serving the name again rolls it over
(the new server answers ready, the front switches to it, the requests in flight to the old one finish, then the
old one stops, draining too). With ``servers`` (`--backend kubernetes`) the same version is served on the cluster
instead (`backends.k8s_modelservers`): a pod per version, the files sent into it, a Service as the address.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from securesystemslib.signer import Key

from learnerkit.scheduler.backends.k8s_cluster import connect
from learnerkit.scheduler.backends.k8s_modelservers import KubernetesModelServers as KubernetesModelServers
from learnerkit.scheduler.backends.modelservers import (
    SERVER_IMAGE as SERVER_IMAGE,
)
from learnerkit.scheduler.backends.modelservers import (
    Served,
    ServingError,
    read_only_for_all,
    roll_over,
)
from learnerkit.scheduler.backends.modelservers import served as served
from learnerkit.scheduler.backends.modelservers import stop as stop
from learnerkit.scheduler.catalog.errors import RefusedError
from learnerkit.scheduler.catalog.names import Reference
from learnerkit.scheduler.catalog.proof import WEIGHTS
from learnerkit.scheduler.catalog.service import check_version, pull
from learnerkit.scheduler.catalog.versions import Store, resolve
from learnerkit_build.publish.push import PublishRefused, check_gates


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
    """Serve ``reference`` (NAME@ALIAS or NAME@VERSION) at the name's address (``port``: its host port, where the
    name is not served yet; None: one Docker picks); the version's files are kept under ``home``. ``servers``:
    on that cluster instead of the local engine (by the image's reference: the cluster has its own copy)."""
    ref = Reference.parse(reference)
    digest = resolve(store, ref)
    proof = check_version(store, ref.name, digest, keys)
    if proof.failed_checks(WEIGHTS):
        reasons = [r for r in proof.reasons() if r.startswith(WEIGHTS)]
        raise RefusedError(f"{ref.name}@{digest} is not served: {'; '.join(reasons)}", [WEIGHTS])
    try:
        image_id = str(check_gates(image).image_id)
    except PublishRefused as e:
        raise ServingError(f"the model server image is not served from: {e}") from e
    folder = _pulled(store, ref.name, digest, home)
    keys_folder = _public_keys(key_files, folder.parent / f"{folder.name}.keys")
    if servers is not None:
        return servers.roll_over(store.tenant, ref.name, digest, folder, keys_folder, image, image_id)
    return roll_over(
        store.tenant, ref.name, digest, folder, keys_folder, image_id, home / store.tenant / ref.name / "front", port
    )


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
    folder = home / tenant / name
    if folder.is_dir():
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(folder)
