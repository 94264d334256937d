"""What an image's package managers say is installed: dpkg's status file and Python distributions."""

from __future__ import annotations

import email.parser
import posixpath
from dataclasses import dataclass

from debian.deb822 import Deb822

from learnerkit_build.scan.layers import ImageIndex

DPKG_STATUS = "/var/lib/dpkg/status"
DPKG_INFO = "/var/lib/dpkg/info/"
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
ACCOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow")


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    architecture: str
    source: str
    source_version: str


@dataclass(frozen=True)
class PythonDist:
    name: str
    version: str
    path: str
    """The dist-info folder that records it."""


def wanted(path: str) -> bool:
    """The files the package checks and the SBOM read, kept by the layer index."""
    return (
        path == DPKG_STATUS
        or path in OS_RELEASE
        or path in ACCOUNT_FILES
        or (path.startswith(DPKG_INFO) and path.endswith(".list"))
        or path.endswith((".dist-info/METADATA", ".egg-info/PKG-INFO"))
    )


def deb_packages(index: ImageIndex) -> list[DebPackage] | None:
    """Installed Debian packages, or None when the image has no dpkg status file."""
    text = index.text(DPKG_STATUS)
    return None if text is None else parse_dpkg_status(text)


def parse_dpkg_status(text: str) -> list[DebPackage]:
    packages = []
    for para in Deb822.iter_paragraphs(text.splitlines()):
        if "install ok installed" not in para.get("Status", ""):
            continue
        name, version = para["Package"], para["Version"]
        source, source_version = name, version
        if raw := para.get("Source"):
            source, _, rest = raw.partition(" ")
            source_version = rest.strip("() ") or version
        packages.append(DebPackage(name, version, para.get("Architecture", ""), source, source_version))
    return sorted(packages, key=lambda p: p.name)


def python_dists(index: ImageIndex) -> list[PythonDist]:
    dists = {}
    parser = email.parser.HeaderParser()
    for path, data in index.contents.items():
        if not path.endswith(("/METADATA", "/PKG-INFO")) or path.startswith(DPKG_INFO):
            continue
        meta = parser.parsestr(data.decode("utf-8", errors="replace"))
        name, version = meta.get("Name"), meta.get("Version")
        if name and version:
            dists[(name.lower(), version, path)] = PythonDist(name, version, posixpath.dirname(path))
    return sorted(dists.values(), key=lambda d: (d.name.lower(), d.path))


def os_release(index: ImageIndex) -> dict[str, str]:
    for path in OS_RELEASE:
        text = index.text(path)
        if text is not None:
            pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
            return {key: value.strip().strip('"') for key, value in pairs}
    return {}


def dpkg_owned_files(index: ImageIndex) -> set[str] | None:
    """Every path some package's file list names, or None without dpkg."""
    lists = [path for path in index.contents if path.startswith(DPKG_INFO) and path.endswith(".list")]
    if not lists:
        return None
    owned: set[str] = set()
    for path in lists:
        owned.update(line for line in index.contents[path].decode("utf-8", errors="replace").splitlines() if line)
    return owned
