"""A small client of the registry HTTP API v2 (distribution): blobs and manifests, digests checked."""

from __future__ import annotations

import hashlib
from typing import Any

import requests

from learnerkit_build.errors import BuildToolError

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
TIMEOUT_S = 60


class RegistryError(BuildToolError):
    """The registry refused a request or returned content whose digest does not match."""


def _url(registry: str, path: str) -> str:
    scheme = "http" if registry.startswith(("127.", "localhost")) else "https"
    return f"{scheme}://{registry}/v2/{path}"


def _call(method: str, url: str, **kwargs: Any) -> requests.Response:
    try:
        response = requests.request(method, url, timeout=TIMEOUT_S, **kwargs)
    except requests.RequestException as e:
        raise RegistryError(f"{method} {url}: {e}") from e
    return response


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def put_blob(registry: str, repository: str, data: bytes) -> str:
    digest = sha256_digest(data)
    start = _call("POST", _url(registry, f"{repository}/blobs/uploads/"))
    if start.status_code != 202 or "Location" not in start.headers:
        raise RegistryError(f"{registry}/{repository}: blob upload refused ({start.status_code}): {start.text[:200]}")
    location = start.headers["Location"]
    if location.startswith("/"):
        location = _url(registry, "").removesuffix("/v2/") + location
    done = _call(
        "PUT", location, params={"digest": digest}, data=data, headers={"Content-Type": "application/octet-stream"}
    )
    if done.status_code != 201:
        raise RegistryError(
            f"{registry}/{repository}: blob {digest} not stored ({done.status_code}): {done.text[:200]}"
        )
    return digest


def get_blob(registry: str, repository: str, digest: str) -> bytes:
    response = _call("GET", _url(registry, f"{repository}/blobs/{digest}"))
    if response.status_code != 200:
        raise RegistryError(f"{registry}/{repository}: no blob {digest} ({response.status_code})")
    if sha256_digest(response.content) != digest:
        raise RegistryError(f"{registry}/{repository}: blob {digest} has different content")
    return response.content


def put_manifest(registry: str, repository: str, reference: str, body: bytes, media_type: str) -> str:
    return put_manifest_subject(registry, repository, reference, body, media_type)[0]


def put_manifest_subject(
    registry: str, repository: str, reference: str, body: bytes, media_type: str
) -> tuple[str, bool]:
    """Push a manifest; (its digest, whether the registry indexed its `subject`: the `OCI-Subject` header)."""
    response = _call(
        "PUT", _url(registry, f"{repository}/manifests/{reference}"), data=body, headers={"Content-Type": media_type}
    )
    if response.status_code != 201:
        raise RegistryError(
            f"{registry}/{repository}:{reference}: manifest refused ({response.status_code}): {response.text[:300]}"
        )
    return sha256_digest(body), "OCI-Subject" in response.headers


def get_referrers(registry: str, repository: str, digest: str) -> dict[str, Any] | None:
    """The referrers API's image index for `digest`, or None where the registry has no referrers API."""
    url = _url(registry, f"{repository}/referrers/{digest}")
    response = _call("GET", url, headers={"Accept": "application/vnd.oci.image.index.v1+json"})
    if response.status_code == 404 or not response.headers.get("Content-Type", "").startswith(INDEX_TYPE):
        return None
    if response.status_code != 200:
        raise RegistryError(f"{registry}/{repository}: referrers of {digest} not readable ({response.status_code})")
    try:
        index: dict[str, Any] = response.json()
    except ValueError as e:
        raise RegistryError(f"{registry}/{repository}: referrers of {digest}: not JSON: {e}") from e
    return index


def get_manifest(registry: str, repository: str, reference: str) -> tuple[bytes, str] | None:
    """(manifest bytes, digest) of a tag or digest, or None when the registry has no such manifest."""
    response = _call("GET", _url(registry, f"{repository}/manifests/{reference}"), headers={"Accept": MANIFEST_TYPES})
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise RegistryError(f"{registry}/{repository}:{reference}: manifest not readable ({response.status_code})")
    digest = sha256_digest(response.content)
    if reference.startswith("sha256:") and digest != reference:
        raise RegistryError(f"{registry}/{repository}@{reference}: manifest content has digest {digest}")
    return response.content, digest
