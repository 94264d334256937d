"""Where sidecars fetch a job's requirements: the scheduler's ``LEARNERKIT_PIP_*`` settings, each left unset taken
from the host's pip configuration as image builds take it (``learnerkit_build.recipes.pipconfig``).

The sidecar runs in a container: a CA bundle and find-links folders of this host reach it as read-only mounts (the
Docker backend) under :data:`SIDECAR_PIP_DIR`. Kubernetes nodes see nothing of this host: there the CA bundle's
content travels with each job (its Secret, mounted read-only at the same path), and find-links folders are left
out with a warning. An index on this host's disk (``file://``) reaches no sidecar, and is left out with a warning,
as a build leaves it out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from controller_sidecar.requirements import PackageIndex
from learnerkit.scheduler.config.settings import PackageSettings
from learnerkit.scheduler.errors import SettingsError
from learnerkit_build.recipes.pipconfig import pip_setting

LOGGER = logging.getLogger(__name__)
SIDECAR_PIP_DIR = "/etc/learnerkit/pip"
"""Where the sidecar sees the platform's CA bundle (``ca.pem``) and find-links folders (``find-links/<n>``)."""
SIDECAR_CA_BUNDLE = f"{SIDECAR_PIP_DIR}/ca.pem"
MAX_CA_BUNDLE_BYTES = 960 << 10
"""Kubernetes: the CA bundle goes in each job's Secret, which holds at most 1 MiB; the rest is the credentials'."""
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class SidecarPackages:
    index: PackageIndex
    """What every sidecar's pip is told (the image's Python and lock are added per job)."""
    mounts: dict[str, str]
    """Container path -> host path, mounted read-only into every sidecar (Docker)."""
    files: dict[str, str]
    """Container path -> text, carried by every job to its sidecars (Kubernetes: in the job's Secret)."""


def sidecar_packages(settings: PackageSettings, pip: Mapping[str, str], *, can_mount: bool = True) -> SidecarPackages:
    """The package index of ``settings``, each setting left unset from ``pip`` (``pip config list``);
    ``can_mount``: the backend mounts host files into sidecars (Kubernetes does not: the CA bundle travels as
    content, find-links folders are left out). Refuses (SettingsError) a CA bundle no job's Secret can carry."""
    index_url = settings.index_url or _first(pip, "index-url")
    extra = settings.extra_index_urls or _many(pip, "extra-index-url")
    trusted = settings.trusted_hosts or _many(pip, "trusted-host")
    links = settings.find_links or _many(pip, "find-links")
    ca = settings.ca_bundle or (Path(found) if (found := _first(pip, "cert")) else None)
    mounts: dict[str, str] = {}
    files: dict[str, str] = {}
    kept_links = []
    for link in links:
        folder = _local_folder(link)
        if folder is None:
            kept_links.append(link)
        elif not can_mount:
            LOGGER.warning(
                "find-links %s: a folder of this host, which no Kubernetes sidecar sees; left out (serve it over "
                "http(s) and give its URL in LEARNERKIT_PIP_FIND_LINKS)",
                link,
            )
        elif folder.is_dir():
            inside = f"{SIDECAR_PIP_DIR}/find-links/{len(mounts)}"
            mounts[inside] = str(folder.resolve())
            kept_links.append(inside)
        else:
            LOGGER.warning("find-links %s: no such folder on this host; sidecars do without it", link)
    ca_bundle = None
    if ca is not None:
        if not ca.is_file():
            LOGGER.warning("CA bundle %s: no such file on this host; sidecars use their own CA certificates", ca)
        elif can_mount:
            ca_bundle = SIDECAR_CA_BUNDLE
            mounts[ca_bundle] = str(ca.resolve())
        else:
            ca_bundle = SIDECAR_CA_BUNDLE
            files[ca_bundle] = _pem(ca)
    index = PackageIndex(
        index_url=_remote(index_url),
        extra_index_urls=tuple(url for url in map(_remote, extra) if url is not None),
        trusted_hosts=trusted,
        find_links=tuple(kept_links),
        ca_bundle=ca_bundle,
    )
    return SidecarPackages(index, mounts, files)


def _pem(path: Path) -> str:
    """The CA bundle's text, for a job's Secret: PEM certificates, small enough for it."""
    where = f"CA bundle {path} (LEARNERKIT_PIP_CA_BUNDLE, else pip's cert)"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SettingsError(f"{where}: cannot be read: {e.strerror}") from e
    if len(data) > MAX_CA_BUNDLE_BYTES:
        raise SettingsError(
            f"{where}: {len(data)} bytes, larger than a Kubernetes Secret carries beside the job's credentials "
            f"({MAX_CA_BUNDLE_BYTES} bytes); give a bundle of only the certificates the package index needs"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if PEM_CERTIFICATE not in text:
        raise SettingsError(f"{where}: not a PEM file (no '{PEM_CERTIFICATE}' line); pip reads PEM certificates")
    return text


def _first(pip: Mapping[str, str], name: str) -> str | None:
    found = pip_setting(pip, name)
    return found[0].split()[0] if found and found[0].split() else None


def _many(pip: Mapping[str, str], name: str) -> tuple[str, ...]:
    found = pip_setting(pip, name)
    return tuple(found[0].split()) if found else ()


def _local_folder(link: str) -> Path | None:
    parts = urlsplit(link)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    return None if parts.scheme in ("http", "https") else Path(link).expanduser()


def _remote(url: str | None) -> str | None:
    parts = urlsplit(url) if url is not None else None
    if parts is not None and parts.password is not None:
        LOGGER.warning(
            "package index %s holds a password, which every sidecar's config (not a secret) will show; serve the "
            "index without one to the sidecars' network, or give LEARNERKIT_PIP_INDEX_URL",
            parts._replace(netloc=parts.hostname or "").geturl(),
        )
    if url is None or (parts is not None and parts.scheme in ("http", "https")):
        return url
    LOGGER.warning("package index %s: on this host's disk, which no sidecar reaches; left out", url)
    return None
