"""The SBOM of a synthetic image and its lock: each package's .deb or wheel sha256, its stated licence and the
dependency graph, valid CycloneDX 1.6 by cyclonedx-python-lib's validator and bundled schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from learnerkit_build.lock.model import LockedDeb, LockedWheel, make_lock, write_lock
from learnerkit_build.scan.packages import deb_packages, python_dists
from learnerkit_build.scan.sbom import all_components, build_sbom, read_image_lock, validate_sbom
from tests.unit.learnerkit_build.scan.conftest import DPKG_STATUS, F, LayerSpec, MakeIndex

SITE = "/opt/learner/venv/lib/python3.11/site-packages"
STATUS = (
    DPKG_STATUS.replace("Version: 2.36-9+deb12u7\n", "Version: 2.36-9+deb12u7\nProvides: libc-dev-bin-virtual\n")
    + """
Package: libssl3
Status: install ok installed
Architecture: amd64
Source: openssl
Version: 3.0.17-1~deb12u2
Depends: libc6 (>= 2.34), nosuch | libc-dev-bin-virtual
"""
)
DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: openssl

Files: *
Copyright: the OpenSSL authors
License: Apache-2.0
 The text.

Files: debian/*
Copyright: Debian
License: GPL-2+
"""


def metadata(name: str, version: str, *extra: str) -> str:
    return "\n".join(["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", *extra]) + "\n"


PACKAGES = LayerSpec(
    [
        F("/var/lib/dpkg/status", STATUS),
        F("/usr/share/doc/libssl3/copyright", DEP5),
        F("/usr/share/doc/libc6", kind="symlink", linkname="libssl3"),  # its docs are another package's
        F("/usr/share/doc/tini/copyright", "tini, by Thomas Orozco. MIT licence, see /usr/share/common-licenses.\n"),
        F(
            f"{SITE}/requests-2.31.0.dist-info/METADATA",
            metadata(
                "requests",
                "2.31.0",
                "License: Apache 2.0",
                "Requires-Dist: urllib3<3,>=1.21.1",
                "Requires-Dist: PySocks!=1.5.7,>=1.5.6; extra == 'socks'",
                'Requires-Dist: win-inet-pton; sys_platform == "win32"',
            ),
        ),
        F(
            f"{SITE}/urllib3-2.2.1.dist-info/METADATA",
            metadata(
                "urllib3", "2.2.1", "License-Expression: MIT", "Classifier: License :: OSI Approved :: MIT License"
            ),
        ),
        F(
            f"{SITE}/six-1.16.0.dist-info/METADATA",
            metadata("six", "1.16.0", "Classifier: License :: OSI Approved :: MIT License"),
        ),
    ]
)


def sha(n: int) -> str:
    return f"{n:064x}"


def lock_file(tmp_path: Path) -> Path:
    lock = make_lock(
        "pytorch:2.13-cpu",
        [
            LockedDeb("libc6", "2.36-9+deb12u7", "amd64", "libc6_2.36-9+deb12u7_amd64.deb", sha(1), "base"),
            LockedDeb("libssl3", "3.0.17-1~deb12u2", "amd64", "libssl3_3.0.17-1~deb12u2_amd64.deb", sha(2), "image"),
            LockedDeb("tini", "0.19.0-0", "amd64", "tini_0.19.0-0_amd64.deb", sha(3), "image"),  # not the image's
        ],
        [
            LockedWheel("requests", "2.31.0", "requests-2.31.0-py3-none-any.whl", sha(4)),
            LockedWheel("urllib3", "2.2.1", "urllib3-2.2.1-py3-none-any.whl", sha(5)),
            LockedWheel("six", "1.16.0", "six-1.16.0-py2.py3-none-any.whl", sha(6)),
        ],
    )
    path = tmp_path / "lock.json"
    write_lock(path, lock)
    return path


def sbom_of(make_index: MakeIndex, tmp_path: Path) -> dict[str, Any]:
    index, _ = make_index(PACKAGES)
    lock = read_image_lock(lock_file(tmp_path))
    sbom = build_sbom(index, index.config_digest, deb_packages(index) or [], python_dists(index), lock=lock)
    validate_sbom(sbom)
    return sbom


def by_name(sbom: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c["name"]): c for c in all_components(sbom)}


def test_each_package_the_lock_names_at_its_version_carries_the_sha256_of_its_file(
    make_index: MakeIndex, tmp_path: Path
) -> None:
    sbom = sbom_of(make_index, tmp_path)
    hashes = {name: c.get("hashes") for name, c in by_name(sbom).items() if "purl" in c}
    assert hashes == {
        "libc6": [{"alg": "SHA-256", "content": sha(1)}],
        "libssl3": [{"alg": "SHA-256", "content": sha(2)}],
        "tini": None,  # the lock names another version: no hash is claimed for what the image holds
        "requests": [{"alg": "SHA-256", "content": sha(4)}],
        "urllib3": [{"alg": "SHA-256", "content": sha(5)}],
        "six": [{"alg": "SHA-256", "content": sha(6)}],
    }
    props = {p["name"]: p["value"] for p in sbom["metadata"]["component"]["properties"]}
    assert props["learnerkit:lock"] == "pytorch:2.13-cpu"
    assert len(props["learnerkit:lock-sha256"]) == 64


def test_licences_are_what_each_package_states_and_nothing_is_guessed(make_index: MakeIndex, tmp_path: Path) -> None:
    components = by_name(sbom_of(make_index, tmp_path))
    licences = {name: c.get("licenses") for name, c in components.items() if "purl" in c}
    assert licences == {
        "libc6": [{"license": {"id": "Apache-2.0"}}, {"license": {"name": "GPL-2+"}}],  # through the link
        "libssl3": [{"license": {"id": "Apache-2.0"}}, {"license": {"name": "GPL-2+"}}],
        "tini": None,  # a copyright file not in the machine-readable format
        "requests": [{"license": {"name": "Apache 2.0"}}],
        "urllib3": [{"license": {"id": "MIT"}}],
        "six": [{"license": {"id": "MIT"}}],
    }


def test_the_dependency_graph_is_dpkgs_and_the_metadatas_under_the_images_markers(
    make_index: MakeIndex, tmp_path: Path
) -> None:
    sbom = sbom_of(make_index, tmp_path)
    refs = {str(c["bom-ref"]): str(c["name"]) for c in all_components(sbom)}
    graph = {refs.get(d["ref"], "image"): sorted(refs[r] for r in d["dependsOn"]) for d in sbom["dependencies"]}
    assert graph["libssl3"] == ["libc6"]  # by name, and the second relation through libc6's Provides
    assert graph["requests"] == ["urllib3"]  # socks is an extra, win-inet-pton for another platform
    assert graph["urllib3"] == graph["six"] == graph["libc6"] == graph["tini"] == []
    assert graph["image"] == sorted(refs[str(c["bom-ref"])] for c in sbom["components"])
