"""Checkpoints out and back: upload the learner's complete ``ckpt-<step>`` folders, restore the newest.

The learner writes each checkpoint under a ``.tmp-`` name and renames it when complete (see
``learner.checkpoints``), so only ``ckpt-*`` folders are uploaded. In the store, a checkpoint counts only
once its marker ``<ckpt>/.complete`` exists; it is written after every file, and lists each file's size
and ETag. A checkpoint whose upload was cut short has no marker and is never restored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from controller_sidecar.atomicfile import fsync_dir, write_json_atomic
from controller_sidecar.download import download_prefix
from controller_sidecar.errors import TransferError, UnsafeFileError
from controller_sidecar.jobfiles import open_learner_file, read_regular, regular_files, warn_once
from controller_sidecar.resultkeys import encoded_name
from controller_sidecar.retry import Backoff, retry_sync
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location

if TYPE_CHECKING:
    from controller_sidecar.s3store import S3Store

LOGGER = logging.getLogger(__name__)
MARKER = ".complete"
CHECKPOINT_NAME = re.compile(r"ckpt-(\d{10,})")
RESTORE_PREFIX = ".tmp-restore-"
"""Restores are staged under this name in ``CHECKPOINT_DIR``; the learner ignores ``.tmp-`` entries."""


def _local_checkpoints(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoint folders, oldest step first."""
    try:
        entries = list(checkpoint_dir.iterdir())
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        match = CHECKPOINT_NAME.fullmatch(entry.name)
        if match and entry.is_dir() and not entry.is_symlink():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def _identity(folder: Path) -> str:
    """Changes when the learner replaces a checkpoint of the same step (a new folder renamed into place)."""
    info = folder.lstat()
    return f"{info.st_ino}:{info.st_ctime_ns}"


def _load_uploaded(state_file: Path, location: S3Location) -> dict[str, str]:
    """Name -> folder identity of what was uploaded to ``location``; empty when missing, unreadable or other."""
    try:
        raw = json.loads(read_regular(state_file))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, UnsafeFileError) as error:
        LOGGER.warning("ignoring the unreadable checkpoint upload state %s: %s", state_file, error)
        return {}
    if not isinstance(raw, Mapping) or raw.get("destination") != str(location):
        return {}
    uploaded = raw.get("uploaded")
    return {str(k): str(v) for k, v in uploaded.items()} if isinstance(uploaded, Mapping) else {}


def upload_checkpoints(
    store: S3Store,
    checkpoint_dir: Path,
    location: S3Location,
    *,
    state_file: Path,
    backoff: Backoff | None = None,
) -> list[str]:
    """Upload each complete checkpoint not uploaded yet (oldest first); returns their names.

    Files go first, the ``.complete`` marker last. Each uploaded folder is recorded in ``state_file``
    (atomically, by name and identity), so calling this again uploads only what is new, including a
    checkpoint the learner wrote again under the same step. A checkpoint the learner deletes while it
    is being uploaded (it keeps only its newest few) is skipped. ``backoff`` retries each request.
    """
    backoff = backoff or Backoff()
    uploaded = _load_uploaded(state_file, location)
    done: list[str] = []
    for step, folder in _local_checkpoints(checkpoint_dir):
        try:
            identity = _identity(folder)
            if uploaded.get(folder.name) == identity:
                continue
            manifest = _upload_one(store, folder, location, backoff)
        except FileNotFoundError:
            if folder.exists():
                raise
            LOGGER.info("checkpoint %s was deleted while it was being uploaded; skipped", folder.name)
            continue
        except UnsafeFileError as error:
            warn_once(folder, f"checkpoint {folder.name} skipped: {error}", LOGGER)
            continue
        marker = json.dumps({"step": step, "files": manifest}, sort_keys=True).encode()
        key = location.key(f"{folder.name}/{MARKER}")
        retry_sync(partial(store.put_bytes, location.bucket, key, marker), backoff, what=key)
        uploaded[folder.name] = identity
        write_json_atomic(state_file, {"destination": str(location), "uploaded": uploaded})
        done.append(folder.name)
    return done


def _upload_one(store: S3Store, folder: Path, location: S3Location, backoff: Backoff) -> dict[str, dict[str, object]]:
    """Upload the regular files of one checkpoint; links in it are skipped with a warning (jobfiles)."""
    manifest: dict[str, dict[str, object]] = {}
    for relative in regular_files(folder):
        path = folder / relative
        handle = open_learner_file(path, gone_ok=False)  # gone: the learner deleted the checkpoint
        if handle is None:
            continue
        name = encoded_name(relative)  # as results: a name S3 or botocore cannot carry is percent-encoded
        key = location.key(f"{folder.name}/{name}")
        with handle:
            upload = partial(store.upload_stream, handle, location.bucket, key, source=str(path))
            stored = retry_sync(upload, backoff, what=f"upload {encoded_name(str(path))}")
        manifest[name] = {"size": stored.size, "etag": stored.etag}
    return manifest


def _matches_manifest(objects: list[RemoteObject], prefix: str, manifest: object) -> bool:
    """Every file the marker lists is in the store with its size and ETag."""
    if not isinstance(manifest, Mapping) or not isinstance(manifest.get("files"), Mapping):
        return False
    present = {obj.key[len(prefix) :]: obj for obj in objects}
    for relative, record in manifest["files"].items():
        obj = present.get(relative)
        if obj is None or not isinstance(record, Mapping):
            return False
        if obj.size != record.get("size") or obj.etag != record.get("etag"):
            return False
    return True


def restore_latest_checkpoint(
    store: S3Store,
    location: S3Location,
    checkpoint_dir: Path,
    *,
    concurrency: int,
    backoff: Backoff,
) -> int | None:
    """Download the newest checkpoint that has its marker into ``checkpoint_dir/<name>``; returns its step.

    None when the store holds no complete checkpoint. The files are staged under a ``.tmp-restore-`` name
    and renamed into place, so the learner never sees a half-restored checkpoint; a checkpoint already
    present locally under its name is complete (it got there by rename) and is not downloaded again.
    """
    objects = retry_sync(lambda: store.list(location), backoff, what=f"list {location}")
    by_name: dict[str, list[RemoteObject]] = {}
    for obj in objects:
        name, _, _rest = obj.key[len(location.prefix) :].partition("/")
        if CHECKPOINT_NAME.fullmatch(name):
            by_name.setdefault(name, []).append(obj)
    candidates = sorted(
        (name for name, objs in by_name.items() if any(o.key.endswith(f"/{MARKER}") for o in objs)),
        key=lambda name: int(name.removeprefix("ckpt-")),
        reverse=True,
    )
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    for stale in checkpoint_dir.glob(f"{RESTORE_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    for name in candidates:
        step = int(name.removeprefix("ckpt-"))
        final = checkpoint_dir / name
        if final.is_dir() and not final.is_symlink():
            return step
        prefix = location.key(f"{name}/")
        marker_key = prefix + MARKER
        raw = retry_sync(partial(store.get_bytes, location.bucket, marker_key), backoff, what=marker_key)
        try:
            manifest = json.loads(raw)
        except ValueError:
            manifest = None
        files = [obj for obj in by_name[name] if obj.key != marker_key]
        if not _matches_manifest(files, prefix, manifest):
            LOGGER.warning("s3://%s/%s: files differ from the marker; trying an older one", location.bucket, prefix)
            continue
        _restore(store, S3Location(location.bucket, prefix), final, concurrency=concurrency, backoff=backoff)
        return step
    return None


def checkpoint_digest(store: S3Store, location: S3Location, step: int, *, backoff: Backoff) -> str:
    """The SHA-256 of checkpoint ``step``'s marker: its list of files with their sizes and ETags, so it names the
    checkpoint's content (the job's provenance records it for the attempt that restored it)."""
    objects = retry_sync(lambda: store.list(location), backoff, what=f"list {location}")
    for obj in objects:
        name, _, rest = obj.key[len(location.prefix) :].partition("/")
        if rest == MARKER and CHECKPOINT_NAME.fullmatch(name) and int(name.removeprefix("ckpt-")) == step:
            marker = retry_sync(partial(store.get_bytes, location.bucket, obj.key), backoff, what=obj.key)
            return hashlib.sha256(marker).hexdigest()
    raise TransferError(f"{location}: no marker of the checkpoint of step {step}")


def _restore(store: S3Store, location: S3Location, final: Path, *, concurrency: int, backoff: Backoff) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f"{RESTORE_PREFIX}{final.name}-", dir=final.parent))
    try:
        content = staging / final.name
        download_prefix(
            store,
            location,
            content,
            state_file=staging / "download-state.json",
            concurrency=concurrency,
            backoff=backoff,
        )
        (content / MARKER).unlink(missing_ok=True)
        if not content.is_dir():
            raise TransferError(f"{location}: nothing was downloaded")
        content.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    fsync_dir(final.parent)
