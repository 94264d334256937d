"""Who depends on whom among an image's packages, from what the package managers recorded.

Debian: each `Pre-Depends`/`Depends` relation of dpkg's status file, resolved to the first alternative installed
(by name or by a package that `Provides` it). Python: each `Requires-Dist` whose marker holds in the image (no
extra requested; the image's Python version from the site folder, Linux on the image's architecture: never the
host's), resolved to the distribution of that name in the same folder. A relation nothing installed satisfies is
left out: dpkg and `pip check` passed at build time, so it is an alternative or an extra the image does without.
"""

from __future__ import annotations

import posixpath
import re

from packaging.markers import InvalidMarker, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from learnerkit_build.scan.packages import DebPackage, PythonDist

MACHINES = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}
SITE_PYTHON = re.compile(r"/python(\d+\.\d+)/")


def deb_dependencies(debs: list[DebPackage]) -> dict[DebPackage, list[DebPackage]]:
    by_name: dict[str, list[DebPackage]] = {}
    for package in debs:
        by_name.setdefault(package.name, []).append(package)
    for package in debs:
        for virtual in package.provides:
            by_name.setdefault(virtual, []).append(package)
    graph: dict[DebPackage, list[DebPackage]] = {}
    for package in debs:
        found: dict[tuple[str, str], DebPackage] = {}
        for alternatives in package.depends:
            for name in alternatives:
                if by_name.get(name):
                    for target in by_name[name]:
                        if target != package:
                            found[(target.name, target.architecture)] = target
                    break
        graph[package] = [found[key] for key in sorted(found)]
    return graph


def marker_environment(dist: PythonDist, architecture: str) -> dict[str, str]:
    """PEP 508's environment of the image's interpreter, as far as its files say."""
    match = SITE_PYTHON.search(dist.path + "/")
    version = match.group(1) if match else "3"
    return {
        "extra": "",
        "python_version": version,
        "python_full_version": f"{version}.0",
        "implementation_name": "cpython",
        "implementation_version": f"{version}.0",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": MACHINES.get(architecture, architecture),
        "platform_release": "",
        "platform_version": "",
    }


def python_dependencies(dists: list[PythonDist], architecture: str) -> dict[PythonDist, list[PythonDist]]:
    by_folder: dict[tuple[str, str], PythonDist] = {
        (posixpath.dirname(dist.path), canonicalize_name(dist.name)): dist for dist in dists
    }
    graph: dict[PythonDist, list[PythonDist]] = {}
    for dist in dists:
        folder, environment = posixpath.dirname(dist.path), marker_environment(dist, architecture)
        found: dict[str, PythonDist] = {}
        for line in dist.requires:
            try:
                requirement = Requirement(line)
                if requirement.marker is not None and not requirement.marker.evaluate(environment):
                    continue
            except (InvalidRequirement, InvalidMarker, UndefinedEnvironmentName):
                continue  # a line pip itself could not act on does not name a dependency
            name = canonicalize_name(requirement.name)
            target = by_folder.get((folder, name))
            if target is not None and target != dist:
                found[name] = target
        graph[dist] = [found[name] for name in sorted(found)]
    return graph
