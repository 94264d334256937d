"""The catalog's store: an OCI registry spoken to over the distribution HTTP API v2.

Blobs are streamed from and to files (a 1 GiB weight file is never held in memory) and every blob read is hashed
as it streams: bytes that are not their digest are refused, naming the blob. Manifests go through the build tool's
registry client (`learnerkit_build.publish.registry`), which checks a manifest's digest the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import requests

from learnerkit.scheduler.catalog.errors import StoreError
from learnerkit_build.publish import registry
from learnerkit_build.publish.registry import RegistryError

CHUNK = 1 << 20
TIMEOUT_S = 60


def _url(host: str, path: str) -> str:
    scheme = "http" if host.startswith(("127.", "localhost")) else "https"
    return f"{scheme}://{host}/v2/{path}"


def _call(method: str, url: str, **kwargs: Any) -> requests.Response:
    try:
        return requests.request(method, url, timeout=TIMEOUT_S, **kwargs)
    except requests.RequestException as e:
        raise StoreError(f"the catalog's registry: {method} {url}: {e}") from e


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def has_blob(host: str, repository: str, digest: str) -> bool:
    return _call("HEAD", _url(host, f"{repository}/blobs/{digest}")).status_code == 200


def put_blob_file(host: str, repository: str, path: Path, digest: str) -> None:
    """Upload ``path`` (whose digest the caller took) unless the repository holds that blob already."""
    if has_blob(host, repository, digest):
        return
    with path.open("rb") as stream:
        _put_blob(host, repository, stream, digest)


def put_blob(host: str, repository: str, data: bytes) -> str:
    try:
        digest: str = registry.put_blob(host, repository, data)
    except RegistryError as e:
        raise StoreError(str(e)) from e
    return digest


def _put_blob(host: str, repository: str, stream: BinaryIO, digest: str) -> None:
    start = _call("POST", _url(host, f"{repository}/blobs/uploads/"))
    if start.status_code != 202 or "Location" not in start.headers:
        raise StoreError(f"{host}/{repository}: blob upload refused ({start.status_code}): {start.text[:200]}")
    location = start.headers["Location"]
    if location.startswith("/"):
        location = _url(host, "").removesuffix("/v2/") + location
    headers = {"Content-Type": "application/octet-stream"}
    done = _call("PUT", location, params={"digest": digest}, data=stream, headers=headers)
    if done.status_code != 201:
        raise StoreError(f"{host}/{repository}: blob {digest} not stored ({done.status_code}): {done.text[:200]}")


def stream_blob(host: str, repository: str, digest: str) -> Iterator[bytes]:
    """The blob's bytes in chunks; raises StoreError at the end where they are not ``digest``."""
    try:
        response = requests.get(_url(host, f"{repository}/blobs/{digest}"), stream=True, timeout=TIMEOUT_S)
    except requests.RequestException as e:
        raise StoreError(f"the catalog's registry: blob {digest}: {e}") from e
    with response:
        if response.status_code != 200:
            raise StoreError(f"{host}/{repository}: no blob {digest} ({response.status_code})")
        hashed = hashlib.sha256()
        for chunk in response.iter_content(CHUNK):
            hashed.update(chunk)
            yield chunk
    if "sha256:" + hashed.hexdigest() != digest:
        raise StoreError(f"{host}/{repository}: blob {digest} has other content (sha256:{hashed.hexdigest()})")


def get_blob(host: str, repository: str, digest: str) -> bytes:
    return b"".join(stream_blob(host, repository, digest))


def put_manifest(host: str, repository: str, reference: str, body: bytes, media_type: str) -> str:
    try:
        digest: str = registry.put_manifest(host, repository, reference, body, media_type)
    except RegistryError as e:
        raise StoreError(str(e)) from e
    return digest


def get_manifest(host: str, repository: str, reference: str) -> tuple[bytes, str] | None:
    """(bytes, digest) of a tag or digest; None where the repository has no such manifest (or no such name)."""
    response = _call(
        "GET", _url(host, f"{repository}/manifests/{reference}"), headers={"Accept": registry.MANIFEST_TYPES}
    )
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise StoreError(f"{host}/{repository}:{reference}: manifest not readable ({response.status_code})")
    digest = sha256_digest(response.content)
    if reference.startswith("sha256:") and digest != reference:
        raise StoreError(f"{host}/{repository}@{reference}: the manifest's content has digest {digest}")
    return response.content, digest


def tags(host: str, repository: str) -> list[str]:
    """Every tag of the repository; [] where it has none or does not exist."""
    found: list[str] = []
    url: str | None = _url(host, f"{repository}/tags/list?n=1000")
    while url:
        response = _call("GET", url)
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise StoreError(f"{host}/{repository}: tags not readable ({response.status_code})")
        found += response.json().get("tags") or []
        link = response.links.get("next", {}).get("url")
        url = None if not link else (_url(host, "").removesuffix("/v2/") + link if link.startswith("/") else link)
    return found


def repositories(host: str) -> list[str]:
    found: list[str] = []
    url: str | None = _url(host, "_catalog?n=1000")
    while url:
        response = _call("GET", url)
        if response.status_code != 200:
            raise StoreError(f"{host}: repositories not readable ({response.status_code})")
        found += response.json().get("repositories") or []
        link = response.links.get("next", {}).get("url")
        url = None if not link else (_url(host, "").removesuffix("/v2/") + link if link.startswith("/") else link)
    return found
