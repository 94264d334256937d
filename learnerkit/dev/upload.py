"""Upload a local folder to the dev S3 store (the demo's sample dataset), each object checked by ETag.

Transient store errors are retried with the sidecar's backoff (:data:`controller_sidecar.retry.HOST_CALLS`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from controller_sidecar.retry import HOST_CALLS, retry_sync
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location, S3Settings
from learnerkit.common.errors import ConfigError
from learnerkit.pair.spec import parse_s3_url

FileDone = Callable[[Path, int], None]
"""Called after each file with its path and size (drives the progress bar)."""


@dataclass(frozen=True)
class UploadedObject:
    key: str
    size: int
    etag: str


@dataclass(frozen=True)
class UploadResult:
    source: str
    destination: str
    objects: list[UploadedObject]
    total_bytes: int


def destination(url: str) -> S3Location:
    """``s3://bucket/prefix`` as a location whose prefix, when not empty, ends with ``/``."""
    bucket, prefix = parse_s3_url(url, "destination")
    prefix = prefix.strip("/")
    return S3Location(bucket, f"{prefix}/" if prefix else "")


def files_under(folder: Path) -> list[Path]:
    """Regular files under ``folder``, in a stable order; symlinks are not followed (nothing leaves it)."""
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder")
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def upload_folder(settings: S3Settings, folder: Path, location: S3Location, on_file: FileDone) -> UploadResult:
    store = S3Store(settings)
    retry_sync(lambda: store.ensure_bucket(location.bucket), HOST_CALLS, what=f"create bucket {location.bucket}")
    uploaded = []
    for path in files_under(folder):
        key = location.key(path.relative_to(folder).as_posix())
        stored = retry_sync(
            functools.partial(store.upload_file, path, location.bucket, key), HOST_CALLS, what=f"upload {path}"
        )
        uploaded.append(UploadedObject(stored.key, stored.size, stored.etag))
        on_file(path, stored.size)
    return UploadResult(str(folder), str(location), uploaded, sum(o.size for o in uploaded))
