"""Publish's security-update gate against Debian's real bookworm-security index (its InRelease and amd64
Packages.xz, fetched once from deb.debian.org on 2026-11-25 into data/bookworm-security, dated 2026-11-23) and
against crafted indexes: a security update the image lacks refuses the publish, unless the scan gate's
allowlist or policy lets it through; an index that cannot be read refuses with the reason."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from learnerkit_build.lock.model import read_lock
from learnerkit_build.publish.securityupdates import (
    ImagePackages,
    IndexSource,
    SecurityUpdatesRefused,
    check_security_updates,
    project_gate,
)
from learnerkit_build.scan.debian_security import (
    KEYRING,
    DebianIndexError,
    SuiteIndex,
    parse_packages,
    read_suite,
)
from learnerkit_build.scan.model import Severity
from learnerkit_build.scan.packages import DebPackage
from learnerkit_build.scan.policy import AllowEntry, Policy

REPO = Path(__file__).resolve().parents[4]
DATA = Path(__file__).parents[1] / "scan" / "data" / "bookworm-security"
MIRROR = "http://deb.debian.org/debian-security"
INDEX_DAY = datetime(2026, 11, 24, tzinfo=UTC)
"""Inside the fixture's validity (Date 2026-11-23, Valid-Until 2026-11-30)."""
TODAY = date(2026, 11, 24)
LOCKS = ["learner_base/lock/debian-bookworm.json", "controller_sidecar/image/lock.json"]


def real_index(now: datetime = INDEX_DAY) -> SuiteIndex:
    packages = (DATA / "Packages.xz").read_bytes()
    return read_suite(
        (DATA / "InRelease").read_bytes(), lambda _url: packages, MIRROR, "bookworm-security", "amd64", KEYRING, now
    )


def locked_image(lock_path: str) -> ImagePackages:
    lock = read_lock(REPO / lock_path)
    packages = [DebPackage(d.package, d.version, d.architecture, d.package, d.version) for d in lock.debian]
    return ImagePackages("bookworm", "amd64", packages)


def serve(index: SuiteIndex) -> IndexSource:
    def source(suite: str, architecture: str) -> SuiteIndex:
        assert (suite, architecture) == ("bookworm-security", "amd64")
        return index

    return source


@pytest.mark.parametrize("lock_path", LOCKS)
def test_the_locked_images_lack_no_update_of_the_real_index(lock_path: str) -> None:
    policy, allowlist = project_gate(REPO)
    found = check_security_updates(
        "learnerkit/x:1", locked_image(lock_path), policy, allowlist, TODAY, serve(real_index())
    )
    assert found.suite == "bookworm-security"
    assert found.index_date.startswith("2026-11-23")
    assert found.checked == len(read_lock(REPO / lock_path).debian)
    assert found.pending == []


def test_one_package_behind_the_real_index_refuses_naming_it() -> None:
    index = real_index()
    image = locked_image(LOCKS[0])
    shared = [p for p in image.packages if (p.name, p.architecture) in index.packages]
    assert shared, "the base shares no package with bookworm-security"
    behind = shared[0]
    newest = index.packages[(behind.name, behind.architecture)].version
    older = DebPackage(behind.name, f"{newest}~older", behind.architecture, behind.source, behind.source_version)
    image = ImagePackages("bookworm", "amd64", [older if p is behind else p for p in image.packages])
    policy, allowlist = project_gate(REPO)
    with pytest.raises(SecurityUpdatesRefused) as refused:
        check_security_updates("learnerkit/x:1", image, policy, allowlist, TODAY, serve(index))
    message = str(refused.value)
    assert "1 Debian security update(s) available but not applied" in message
    assert f"{behind.name} {newest}~older -> {newest} (bookworm-security" in message


CRAFTED = """Package: libssl3
Source: openssl
Version: 3.0.99-1~deb12u1
Architecture: amd64
Filename: pool/updates/main/o/openssl/libssl3_3.0.99-1~deb12u1_amd64.deb
Size: 1
SHA256: 00

Package: zlib1g
Source: zlib
Version: 1:1.2.13.dfsg-1
Architecture: amd64
Filename: pool/updates/main/z/zlib/zlib1g_1.2.13.dfsg-1_amd64.deb
Size: 1
SHA256: 00
"""
IMAGE = ImagePackages(
    "bookworm",
    "amd64",
    [
        DebPackage("libssl3", "3.0.17-1~deb12u2", "amd64", "openssl", "3.0.17-1~deb12u2"),
        DebPackage("zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib", "1:1.2.13.dfsg-1"),
    ],
)


def crafted() -> SuiteIndex:
    return SuiteIndex("bookworm-security", MIRROR, INDEX_DAY, None, parse_packages(CRAFTED))


def test_a_crafted_missing_update_refuses() -> None:
    with pytest.raises(SecurityUpdatesRefused, match=r"libssl3 3\.0\.17-1~deb12u2 -> 3\.0\.99-1~deb12u1"):
        check_security_updates("learnerkit/x:1", IMAGE, Policy(), [], TODAY, serve(crafted()))


def test_the_allowlist_and_the_policy_let_it_through_as_the_scan_gate_would() -> None:
    entry = AllowEntry("src:openssl", "learnerkit/*", "fixed upstream next week", TODAY + timedelta(days=7))
    found = check_security_updates("learnerkit/x:1", IMAGE, Policy(), [entry], TODAY, serve(crafted()))
    assert found.pending == ["libssl3 3.0.17-1~deb12u2 -> 3.0.99-1~deb12u1 (bookworm-security, source openssl)"]
    expired = AllowEntry("src:openssl", "learnerkit/*", "r", TODAY - timedelta(days=1))
    with pytest.raises(SecurityUpdatesRefused):
        check_security_updates("learnerkit/x:1", IMAGE, Policy(), [expired], TODAY, serve(crafted()))
    lenient = Policy(severity_threshold=Severity.CRITICAL)
    assert check_security_updates("learnerkit/x:1", IMAGE, lenient, [], TODAY, serve(crafted())).pending


def test_an_index_that_cannot_be_read_refuses_with_the_reason() -> None:
    def offline(_suite: str, _architecture: str) -> SuiteIndex:
        raise DebianIndexError(
            "fetching http://deb.debian.org/debian-security/dists/bookworm-security/InRelease: no route"
        )

    with pytest.raises(SecurityUpdatesRefused, match=r"bookworm-security's index could not be read.*no route"):
        check_security_updates("learnerkit/x:1", IMAGE, Policy(), [], TODAY, offline)


def test_the_real_index_past_its_valid_until_is_not_read() -> None:
    with pytest.raises(DebianIndexError, match="expired"):
        real_index(INDEX_DAY + timedelta(days=7))
