"""Policy and allowlist, OSV matching and its UNKNOWN cases, SBOM schema, SARIF, DSSE signatures."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from learnerkit_build.scan import debian_security
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status
from learnerkit_build.scan.osv import Canary, OsvPolicy, check_osv
from learnerkit_build.scan.packages import DebPackage, PythonDist, deb_packages, python_dists
from learnerkit_build.scan.policy import AllowEntry, Policy, apply_allowlist, decide, load_allowlist
from learnerkit_build.scan.sbom import SbomError, build_sbom, component_keys, validate_sbom
from tests.unit.learnerkit_build.scan.conftest import F, LayerSpec, MakeIndex

TODAY = date(2026, 11, 22)
FAIL_SECRET = CheckResult(
    "secrets.present", "t", Status.FAIL, Severity.CRITICAL, [Evidence("jwt", path="/opt/x.py", ids=("secret:jwt",))]
)


def test_allowlist_accepts_until_review_by_then_fails_the_gate() -> None:
    entry = AllowEntry("secret:jwt", "test/*", "public docs token", TODAY, "/opt/*.py")
    marked, expired = apply_allowlist([FAIL_SECRET], [entry], "test/image:1", TODAY)
    assert marked[0].evidence[0].allowed_by and decide(marked, expired, Policy()).passed
    late = TODAY + timedelta(days=1)
    marked, expired = apply_allowlist([FAIL_SECRET], [entry], "test/image:1", late)
    decision = decide(marked, expired, Policy())
    assert not decision.passed
    assert {b.check for b in decision.blockers} == {"allowlist.expired", "secrets.present"}


def test_allowlist_scope_is_respected() -> None:
    entry = AllowEntry("secrets.present", "other/*", "r", TODAY)
    marked, _ = apply_allowlist([FAIL_SECRET], [entry], "test/image:1", TODAY)
    assert not decide(marked, [], Policy()).passed


def test_threshold_errors_and_unknown_fails() -> None:
    low = CheckResult("fs.package-cache", "t", Status.FAIL, Severity.LOW, [Evidence("cache")])
    unknown = CheckResult("vuln.osv", "t", Status.UNKNOWN, Severity.HIGH, [Evidence("no db")])
    assert decide([low, unknown], [], Policy()).passed
    assert not decide([low], [], Policy(errors=("fs.package-cache",))).passed
    assert not decide([low], [], Policy(severity_threshold=Severity.LOW)).passed
    assert not decide([unknown], [], Policy(unknown_fails=("vuln.osv",))).passed


def test_allowlist_file_needs_every_field(tmp_path: Path) -> None:
    path = tmp_path / "allow.yaml"
    path.write_text("allow:\n  - {id: x, scope: '*', reason: r}\n", encoding="utf-8")
    with pytest.raises(Exception, match="review_by"):
        load_allowlist(path)


def osv_record(record_id: str, ecosystem: str, name: str, fixed: str, modified: datetime) -> dict[str, object]:
    return {
        "id": record_id,
        "modified": modified.isoformat().replace("+00:00", "Z"),
        "affected": [
            {
                "package": {"ecosystem": ecosystem, "name": name},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
            }
        ],
    }


def write_db(folder: Path, records: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        (folder / f"{record['id']}.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


NOW = datetime(2026, 11, 22, tzinfo=UTC)
CANARIES = [
    osv_record("DSA-0001-1", "Debian:12", "openssl", "3.0.1-1", NOW),
    osv_record("GHSA-canary", "PyPI", "Jinja2", "2.11.3", NOW),
]
DEBS = [
    DebPackage("libssl3", "3.0.11-1~deb12u2", "amd64", "openssl", "3.0.11-1~deb12u2"),
    DebPackage("libc6", "2.36-9+deb12u7", "amd64", "glibc", "2.36-9+deb12u7"),
]
DISTS = [PythonDist("requests", "2.31.0", "/opt/venv/lib/requests-2.31.0.dist-info")]


def test_osv_matches_debian_source_and_pep440(tmp_path: Path) -> None:
    db = write_db(
        tmp_path / "osv",
        [
            *CANARIES,
            osv_record("DSA-9999-1", "Debian:12", "openssl", "3.0.11-1~deb12u3", NOW),
            osv_record("DSA-1000-1", "Debian:12", "glibc", "2.36-9+deb12u4", NOW),
            osv_record("GHSA-req", "PyPI", "Requests", "2.32.0", NOW),
        ],
    )
    result = check_osv(db, DEBS, DISTS, OsvPolicy(), now=NOW)
    assert result.status is Status.FAIL
    assert sorted(e.ids[0] for e in result.evidence) == ["DSA-9999-1", "GHSA-req"]


@pytest.mark.parametrize("case", ["missing", "empty", "stale", "canary"])
def test_osv_unknown_never_clean(tmp_path: Path, case: str) -> None:
    folder = tmp_path / "osv"
    if case == "empty":
        folder.mkdir()
    elif case == "stale":
        write_db(folder, [osv_record("DSA-0001-1", "Debian:12", "openssl", "3.0.1-1", NOW - timedelta(days=30))])
    elif case == "canary":
        write_db(folder, [osv_record("DSA-1000-1", "Debian:12", "glibc", "2.36-9+deb12u4", NOW)])
    result = check_osv(
        folder if case != "missing" else tmp_path / "nope",
        DEBS,
        DISTS,
        OsvPolicy(canaries=(Canary("Debian", "openssl", "3.0.0-1"),)),
        now=NOW,
    )
    assert result.status is Status.UNKNOWN
    assert check_osv(None, DEBS, DISTS, OsvPolicy()).status is Status.UNKNOWN


def test_sbom_validates_and_lists_sources(make_index: MakeIndex) -> None:
    index, _ = make_index(
        LayerSpec(
            [
                F(
                    "/opt/venv/lib/python3.11/site-packages/six-1.17.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: six\nVersion: 1.17.0\n",
                )
            ]
        )
    )
    debs, dists = deb_packages(index) or [], python_dists(index)
    for version in ("1.6", "1.5"):
        sbom = build_sbom(index, "sha256:abc", debs, dists, version)
        validate_sbom(sbom)
    names = {(c["name"], c["version"]) for c in sbom["components"]}
    assert names == {("debian", "12"), ("libc6", "2.36-9+deb12u7"), ("tini", "0.19.0-1"), ("six", "1.17.0")}
    libc = next(c for c in sbom["components"] if c["name"] == "libc6")
    assert {"name": "learnerkit:deb:source", "value": "glibc"} in libc["properties"]
    sbom["components"][0]["type"] = "not-a-type"
    with pytest.raises(SbomError):
        validate_sbom(sbom)


SITE = "/opt/venv/lib/python3.11/site-packages"


def dist_files(name: str, version: str, folder: str = SITE, record: tuple[str, ...] = ()) -> list[F]:
    info = f"{folder}/{name}-{version}.dist-info"
    files = [F(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")]
    if record:
        files.append(F(f"{info}/RECORD", "".join(f"{path},sha256=x,1\n" for path in record)))
    return files


def test_a_vendored_distribution_is_nested_under_the_one_whose_record_lists_it(make_index: MakeIndex) -> None:
    vendored = "setuptools/_vendor/packaging-24.2.dist-info/METADATA"
    index, _ = make_index(
        LayerSpec(
            [
                *dist_files("setuptools", "80.9.0", record=("setuptools/__init__.py", vendored)),
                *dist_files("packaging", "24.2", f"{SITE}/setuptools/_vendor"),
                *dist_files("packaging", "25.0"),
                # Beside setuptools' vendored copy, but listed in nobody's RECORD: stays a component of its own.
                *dist_files("stray", "1.0", f"{SITE}/setuptools/_vendor"),
            ]
        )
    )
    dists = python_dists(index)
    owners = {(d.name, d.version): d.vendored_by for d in dists}
    assert owners == {
        ("packaging", "24.2"): f"{SITE}/setuptools-80.9.0.dist-info",
        ("packaging", "25.0"): None,
        ("setuptools", "80.9.0"): None,
        ("stray", "1.0"): None,
    }
    sbom = build_sbom(index, "sha256:abc", [], dists)
    validate_sbom(sbom)
    top = {(c["name"], c["version"]) for c in sbom["components"]}
    assert top == {("debian", "12"), ("packaging", "25.0"), ("setuptools", "80.9.0"), ("stray", "1.0")}
    setuptools = next(c for c in sbom["components"] if c["name"] == "setuptools")
    assert [(c["name"], c["version"]) for c in setuptools["components"]] == [("packaging", "24.2")]
    assert ("packaging", "24.2") in component_keys(sbom), "comparisons with other tools still see it"


def test_release_past_valid_until_is_refused() -> None:
    content = b"Origin: Debian\nDate: Sat, 01 Nov 2026 00:00:00 UTC\nValid-Until: Sat, 08 Nov 2026 00:00:00 UTC\n"
    with pytest.raises(debian_security.DebianIndexError, match="Valid-Until"):
        debian_security.parse_release(content, "test", NOW)


def test_unsigned_inrelease_is_refused() -> None:
    with pytest.raises(debian_security.DebianIndexError, match="signature"):
        debian_security.verify_inrelease(b"Origin: Debian\nSuite: bookworm-security\n")


def test_pending_updates_and_changelog_cves() -> None:
    index = debian_security.SuiteIndex(
        "bookworm-security",
        "m",
        NOW,
        None,
        debian_security.parse_packages(
            "Package: libc6\nVersion: 2.36-9+deb12u8\nArchitecture: amd64\nSource: glibc\nFilename: f\nSHA256: x\n"
            "Size: 1\n"
        ),
    )
    [(package, entry)] = debian_security.pending_updates(DEBS, index)
    assert (package.name, entry.version) == ("libc6", "2.36-9+deb12u8")
    changelog = (
        "glibc (2.36-9+deb12u8) bookworm-security; urgency=medium\n\n  * Fix CVE-2025-0001 and CVE-2025-0002.\n\n"
        " -- M <m@example.org>  Mon, 01 Sep 2025 00:00:00 +0000\n\n"
        "glibc (2.36-9+deb12u7) bookworm; urgency=medium\n\n  * Fix CVE-2024-9999.\n\n"
        " -- M <m@example.org>  Mon, 01 Jan 2025 00:00:00 +0000\n"
    )
    assert debian_security.changelog_cves(make_deb(changelog), "libc6", "2.36-9+deb12u7") == [
        "CVE-2025-0001",
        "CVE-2025-0002",
    ]


def make_deb(changelog: str) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as archive:
        body = gzip.compress(changelog.encode())
        info = tarfile.TarInfo("./usr/share/doc/libc6/changelog.Debian.gz")
        info.size = len(body)
        archive.addfile(info, io.BytesIO(body))
    out = b"!<arch>\n"
    for name, member in ((b"debian-binary", b"2.0\n"), (b"data.tar.gz", data.getvalue())):
        header = name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"100644".ljust(8)
        out += header + str(len(member)).encode().ljust(10) + b"`\n" + member + (b"\n" if len(member) % 2 else b"")
    return out
