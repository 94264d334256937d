"""A pair's ``/job`` volume sized to the manifest's ``storage`` on the Docker engine: a loop-mounted ext4 file.

The engine's local volume driver mounts a block device but cannot make one (no ``o=loop``), so this module
does: a sparse file of ``storage`` bytes under the state folder, ``mkfs.ext4`` without a journal, its
``lost+found`` removed (the engine copies the image's ``/job`` folders only into an empty volume), a small
reserve kept for the sidecar's user (it still records the learner's end on a full disk), ``losetup`` to attach
it, and a volume of type ext4 on that device whose labels name the file. A learner writing past the size gets
ENOSPC; the host's disk holds at most the file. Removing the volume detaches the device and deletes the file;
a file whose volume is gone (a crash in between) is removed by :func:`sweep_leftovers`.

It needs root beside a local, rootful engine. Elsewhere a job asking for ``storage`` is refused, unless
``$LEARNERKIT_JOB_DISK_UNBOUNDED=1`` lets it run on a plain volume with a warning (docs/security.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from learnerkit.common.engine import EngineError
from learnerkit.pair.spec import SIDECAR_UID

LOGGER = logging.getLogger(__name__)
BACKING_FILE_LABEL = "io.learnerkit.backing-file"
"""The volume's label naming its backing file: removal and the sweep find the file and its loop device."""
DEFAULT_STATE_DIR = Path("/var/lib/learnerkit/job-disks")
BLOCK_SIZE = 4096
SIDECAR_RESERVE_BYTES = 8 << 20
"""Blocks only the sidecar's user may fill (at most 1% of the disk): a learner that filled ``/job`` still has
its end recorded and its logs shipped."""
MIN_STORAGE_BYTES = 1 << 20
TOOLS = ("mkfs.ext4", "tune2fs", "debugfs", "losetup")

Run = Callable[[Sequence[str]], str]
"""Runs an argv and gives its stdout; raises :class:`JobDiskError` when it fails."""


class JobDiskError(EngineError):
    """A sized ``/job`` volume could not be made here, or its backing file could not be removed."""


@dataclass(frozen=True)
class JobDiskSettings:
    """Where the backing files live and what a job asking for ``storage`` gets where none can be made."""

    state_dir: Path = DEFAULT_STATE_DIR
    """``$LEARNERKIT_JOB_DISK_DIR``: the backing files, one sparse file per ``/job`` volume, in a folder per owner."""
    unbounded: bool = False
    """``$LEARNERKIT_JOB_DISK_UNBOUNDED=1``: where loop devices cannot be made (not root, rootless or remote
    engine), run such jobs on plain volumes with a warning instead of refusing them."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobDiskSettings:
        """The scheduler's settings read it (``SchedulerSettings.from_env``); the error names the variable."""
        flag = env.get("LEARNERKIT_JOB_DISK_UNBOUNDED", "0")
        if flag not in ("0", "1"):
            raise JobDiskError(f"LEARNERKIT_JOB_DISK_UNBOUNDED={flag!r}: expected 0 or 1")
        folder = Path(env.get("LEARNERKIT_JOB_DISK_DIR") or DEFAULT_STATE_DIR)
        if not folder.is_absolute():
            raise JobDiskError(f"LEARNERKIT_JOB_DISK_DIR={str(folder)!r}: expected an absolute folder")
        return cls(folder, flag == "1")


def run_tool(argv: Sequence[str]) -> str:
    """The real :data:`Run`: the tool's stdout; its stderr in the error."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise JobDiskError(f"{argv[0]}: {e}") from e
    if done.returncode != 0:
        raise JobDiskError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def why_unavailable(engine_info: Mapping[str, Any], docker_host: str | None) -> str | None:
    """Why sized volumes cannot be made here, or None when they can."""
    if docker_host and not docker_host.startswith("unix://"):
        return f"the engine is remote (DOCKER_HOST={docker_host}): its host cannot see this host's loop devices"
    if any("rootless" in option for option in engine_info.get("SecurityOptions") or []):
        return "the engine runs rootless: it cannot mount a loop device"
    if os.geteuid() != 0:
        return "learnerkit is not running as root: it cannot attach loop devices"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (e2fsprogs, util-linux)"
    if not Path("/dev/loop-control").exists():
        return "this host has no /dev/loop-control (no loop devices)"
    return None


def backing_file(settings: JobDiskSettings, owner: str, volume: str) -> Path:
    return settings.state_dir / owner / f"{volume}.ext4"


def make_backing_file(path: Path, size_bytes: int, run: Run = run_tool) -> str:
    """The sparse, formatted file at ``path``, attached; its loop device. Nothing is left when a step fails."""
    if size_bytes < MIN_STORAGE_BYTES:
        raise JobDiskError(f"storage {size_bytes} bytes: a sized /job needs at least {MIN_STORAGE_BYTES} bytes")
    path.parent.mkdir(parents=True, exist_ok=True)
    reserve = min(SIDECAR_RESERVE_BYTES, size_bytes // 100) // BLOCK_SIZE
    try:
        with path.open("xb") as file:
            file.truncate(size_bytes)
        run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-b", str(BLOCK_SIZE), "-m", "0", str(path)])
        run(["tune2fs", "-r", str(reserve), "-u", str(SIDECAR_UID), "-g", str(SIDECAR_UID), str(path)])
        _remove_lost_found(path, run)
        return run(["losetup", "--find", "--show", str(path)]).strip()
    except (OSError, JobDiskError) as e:
        path.unlink(missing_ok=True)
        raise JobDiskError(f"making the {size_bytes}-byte /job disk {path}: {e}") from e


def _remove_lost_found(path: Path, run: Run) -> None:
    """The engine copies the image's ``/job`` folders only into an empty volume. debugfs exits 0 whatever its
    command did: the listing says whether ``lost+found`` is gone."""
    run(["debugfs", "-w", "-R", "rmdir lost+found", str(path)])
    if "/lost+found/" in run(["debugfs", "-R", "ls -p /", str(path)]):
        raise JobDiskError("debugfs could not remove lost+found")


def release_backing_file(path: Path, run: Run = run_tool) -> None:
    """Detach every loop device on ``path`` and delete it; nothing happens when it is gone already."""
    if not path.exists():
        return
    for line in run(["losetup", "--associated", str(path)]).splitlines():
        device = line.split(":", 1)[0].strip()
        if device:
            run(["losetup", "--detach", device])
    path.unlink(missing_ok=True)


def create_volume(
    client: Any, name: str, labels: Mapping[str, str], size_bytes: int, path: Path, run: Run = run_tool
) -> Any:
    """The engine's ext4 volume ``name`` on a new backing file at ``path``; nothing is left when it fails."""
    device = make_backing_file(path, size_bytes, run)
    try:
        return client.volumes.create(
            name=name,
            driver="local",
            driver_opts={"type": "ext4", "device": device},
            labels={**labels, BACKING_FILE_LABEL: str(path)},
        )
    except docker.errors.APIError:
        release_backing_file(path, run)
        raise


def job_volume(
    client: Any,
    name: str,
    labels: Mapping[str, str],
    job_id: str,
    storage_bytes: int | None,
    settings: JobDiskSettings,
    path: Path,
) -> Any:
    """A volume of the job, backed by ``path`` and sized to ``storage_bytes`` when it is given and this host can
    make one; otherwise refused, or plain with a warning when ``settings`` allow an unbounded ``/job``."""
    if storage_bytes is None:
        return client.volumes.create(name=name, labels=labels)
    why = why_unavailable(client.info(), os.environ.get("DOCKER_HOST"))
    if why is None:
        return create_volume(client, name, labels, storage_bytes, path)
    if not settings.unbounded:
        raise JobDiskError(
            f"job {job_id} asks for storage {storage_bytes} bytes, but {why}; set"
            " LEARNERKIT_JOB_DISK_UNBOUNDED=1 to run such jobs with an unbounded /job"
        )
    LOGGER.warning("job %s: volume %s is not limited to %d bytes: %s", job_id, name, storage_bytes, why)
    return client.volumes.create(name=name, labels=labels)


def remove_volume(api: Any, name: str, run: Run = run_tool) -> None:
    """Remove the volume and, for a sized one, its loop device and backing file; a gone volume is fine."""
    try:
        labels = api.inspect_volume(name).get("Labels") or {}
    except docker.errors.NotFound:
        return
    with suppress(docker.errors.NotFound):
        api.remove_volume(name, force=True)
    if BACKING_FILE_LABEL in labels:
        release_backing_file(Path(labels[BACKING_FILE_LABEL]), run)


def sweep_leftovers(api: Any, settings: JobDiskSettings, owner: str, run: Run = run_tool) -> list[Path]:
    """Release ``owner``'s backing files whose volume is gone (a crash between the two); the files released."""
    folder = settings.state_dir / owner
    if not folder.is_dir():
        return []
    named = {
        (volume.get("Labels") or {}).get(BACKING_FILE_LABEL)
        for volume in api.volumes(filters={"label": BACKING_FILE_LABEL}).get("Volumes") or []
    }
    released = []
    for path in sorted(folder.glob("*.ext4")):
        if str(path) not in named:
            LOGGER.warning("releasing %s: its /job volume is gone", path)
            release_backing_file(path, run)
            released.append(path)
    return released
