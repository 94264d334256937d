"""A served version's verified files into its pod: a tar of the pulled folder (``model/``) and the platform's public
keys (``keys/``) streamed on the exec channel of the pod's ``receive`` init container (what ``kubectl exec -i``
uses: the API server's `pods/exec`, authorised by the scheduler's own account). The pod holds no credential: the
scheduler pushes, the pod never pulls (docs/kubernetes.md, "Serving a model")."""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import kubernetes.client
from kubernetes.stream import stream

from learnerkit.scheduler.backends.k8s_modelobjects import PYTHON, RECEIVE_CONTAINER, RECEIVE_FILES
from learnerkit.scheduler.errors import BackendError

CHUNK = 1 << 20
SEND_TIMEOUT_S = 600.0


def pack(model: Path, keys: Path, into: BinaryIO) -> int:
    """The tar the pod's ``receive`` takes (regular files and folders only, no owner or mode kept); its size."""
    with tarfile.open(fileobj=into, mode="w|", format=tarfile.PAX_FORMAT) as archive:
        for prefix, folder in (("model", model), ("keys", keys)):
            archive.add(folder, arcname=prefix, filter=_plain)
    return into.tell()


def _plain(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if not (member.isfile() or member.isdir()):
        return None
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    member.mode = 0o755 if member.isdir() else 0o644
    return member


def send_files(api: Any, namespace: str, pod: str, model: Path, keys: Path) -> None:
    """Stream ``model`` and ``keys`` into ``pod``'s ``receive`` container; BackendError naming the pod and the
    receiver's words when it does not take them whole."""
    core = kubernetes.client.CoreV1Api(api)
    with tempfile.TemporaryFile() as archive:
        size = pack(model, keys, archive)
        archive.seek(0)
        channel = stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            container=RECEIVE_CONTAINER,
            command=[PYTHON, "-c", RECEIVE_FILES, str(size)],
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            binary=True,
            _preload_content=False,
        )
        try:
            while chunk := archive.read(CHUNK):
                channel.write_stdin(chunk)
            channel.run_forever(timeout=SEND_TIMEOUT_S)
            said = channel.read_stderr(timeout=1)
            code = channel.returncode
        finally:
            channel.close()
    if code != 0:
        words = said.decode("utf-8", "replace").strip() if isinstance(said, bytes) else str(said).strip()
        raise BackendError(f"sending the model's files into Pod {namespace}/{pod}: exit {code}: {words[-2000:]}")
