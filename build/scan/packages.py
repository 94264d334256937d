"""What an image's package managers say is installed: dpkg's status file and Python distributions."""

from __future__ import annotations

import csv
import email.parser
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, replace

from debian.deb822 import Deb822, PkgRelation

from learnerkit_build.scan.layers import ImageIndex

DPKG_STATUS = "/var/lib/dpkg/status"
DPKG_INFO = "/var/lib/dpkg/info/"
DEB_DOCS = "/usr/share/doc/"
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
ACCOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow")


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    architecture: str
    source: str
    source_version: str
    depends: tuple[tuple[str, ...], ...] = ()
    """`Pre-Depends` and `Depends`: each relation's alternatives, by package name."""
    provides: tuple[str, ...] = ()
    """The virtual packages it provides."""


@dataclass(frozen=True)
class PythonDist:
    name: str
    version: str
    path: str
    """The dist-info folder that records it."""
    requires: tuple[str, ...] = ()
    """Its `Requires-Dist` lines as written (markers included)."""
    licence_expression: str = ""
    licence: str = ""
    classifiers: tuple[str, ...] = ()
    vendored_by: str | None = None
    """The dist-info folder of the distribution whose installed files include this one (``setuptools`` vendors
    ``packaging`` under ``setuptools/_vendor/``): its bytes came with that distribution's wheel."""


def wanted(path: str) -> bool:
    """The files the package checks and the SBOM read, kept by the layer index."""
    return (
        path == DPKG_STATUS
        or path in OS_RELEASE
        or path in ACCOUNT_FILES
        or (path.startswith(DPKG_INFO) and path.endswith(".list"))
        or (path.startswith(DEB_DOCS) and path.endswith("/copyright") and path.count("/") == 5)
        or path.endswith((".dist-info/METADATA", ".dist-info/RECORD", ".egg-info/PKG-INFO"))
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
        depends = tuple(
            tuple(alternative["name"] for alternative in relation)
            for field in ("Pre-Depends", "Depends")
            for relation in _relations(para.get(field, ""))
        )
        provides = tuple(
            sorted({alternative["name"] for p in _relations(para.get("Provides", "")) for alternative in p})
        )
        architecture = para.get("Architecture", "")
        packages.append(DebPackage(name, version, architecture, source, source_version, depends, provides))
    return sorted(packages, key=lambda p: p.name)


def _relations(field: str) -> list[list[PkgRelation.ParsedRelation]]:
    """A relationship field's relations, each its alternatives; empty for an empty field."""
    return (
        [relation for relation in PkgRelation.parse_relations(field) if all(a["name"] for a in relation)]
        if field.strip()
        else []
    )


def python_dists(index: ImageIndex) -> list[PythonDist]:
    dists = {}
    parser = email.parser.HeaderParser()
    for path, data in index.contents.items():
        if not path.endswith(("/METADATA", "/PKG-INFO")) or path.startswith(DPKG_INFO):
            continue
        meta = parser.parsestr(data.decode("utf-8", errors="replace"))
        name, version = meta.get("Name"), meta.get("Version")
        if name and version:
            dists[(name.lower(), version, path)] = PythonDist(
                name,
                version,
                posixpath.dirname(path),
                tuple(meta.get_all("Requires-Dist") or ()),
                str(meta.get("License-Expression") or "").strip(),
                str(meta.get("License") or "").strip(),
                tuple(meta.get_all("Classifier") or ()),
            )
    found = _with_vendors(list(dists.values()), index)
    return sorted(found, key=lambda d: (d.name.lower(), d.path))


def _with_vendors(dists: list[PythonDist], index: ImageIndex) -> list[PythonDist]:
    """Each distribution found inside another's installed files (its ``RECORD`` lists the metadata) marked as
    vendored by that one. Only a distribution below a folder that holds other distributions is looked up."""
    by_folder: dict[str, list[PythonDist]] = {}
    for dist in dists:
        by_folder.setdefault(posixpath.dirname(dist.path), []).append(dist)
    records: dict[str, set[str]] = {}
    marked = []
    for dist in dists:
        owner = None
        folder = posixpath.dirname(dist.path)
        for site in _ancestors(folder):
            for candidate in by_folder.get(site, []):
                listed = records.setdefault(candidate.path, _recorded_paths(index, candidate.path))
                if posixpath.relpath(dist.path, site) + "/METADATA" in listed:
                    owner = candidate.path
                    break
            if owner is not None:
                break
        marked.append(replace(dist, vendored_by=owner) if owner else dist)
    return marked


def _ancestors(folder: str) -> Iterable[str]:
    """The folders above ``folder``, nearest first, up to the root (excluded)."""
    while (parent := posixpath.dirname(folder)) not in (folder, "/"):
        yield parent
        folder = parent


def _recorded_paths(index: ImageIndex, dist_info: str) -> set[str]:
    """The paths a distribution's ``RECORD`` lists (relative to its folder); empty without one."""
    text = index.text(f"{dist_info}/RECORD")
    return {row[0] for row in csv.reader((text or "").splitlines()) if row}


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
