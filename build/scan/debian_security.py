"""Pending Debian security updates: the image's dpkg status against Debian's signed indexes, fetched now.

The InRelease file of `<codename>-security` (and `-updates`) is verified with gpgv against the Debian archive
keyring and its `Valid-Until` is enforced; the Packages index is checked against the SHA256 that the signed
file names. For each source package with a pending fix, the fixing .deb is fetched (its SHA256 checked
against the index) and the CVE ids its changelog names above the installed version are reported.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import cache
from pathlib import Path

import requests
from debian.changelog import Changelog
from debian.deb822 import Deb822
from debian.debian_support import Version

from learnerkit_build.errors import BuildToolError
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status, result, unknown
from learnerkit_build.scan.packages import DebPackage

KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
DEFAULT_MIRRORS = {"security": "http://deb.debian.org/debian-security", "updates": "http://deb.debian.org/debian"}
SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
CVE = re.compile(r"\bCVE-\d{4}-\d{4,}\b")
TIMEOUT_S = 60
MAX_DEB_BYTES = 64 << 20
MAX_CHANGELOGS = 40


class DebianIndexError(BuildToolError):
    """A Debian index cannot be fetched, is not validly signed, or is past its Valid-Until."""


@dataclass(frozen=True)
class IndexEntry:
    package: str
    version: str
    architecture: str
    source: str
    filename: str
    sha256: str
    size: int


@dataclass(frozen=True)
class SuiteIndex:
    suite: str
    mirror: str
    date: datetime
    valid_until: datetime | None
    packages: dict[tuple[str, str], IndexEntry]
    """By (package, architecture)."""


@dataclass
class PendingUpdate:
    package: str
    installed: str
    available: str
    source: str
    suite: str
    cves: list[str] = field(default_factory=list)
    note: str = ""


def apt_mirrors(kind: str) -> list[str]:
    """Mirrors this host's apt uses for suites ending in -security (kind security) or the main archive."""
    found: list[str] = []
    files: list[Path] = []
    for source in SOURCES:
        if source.is_file():
            files.append(source)
        elif source.is_dir():
            files += sorted(source.glob("*.list")) + sorted(source.glob("*.sources"))
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        uris = re.findall(r"^URIs:\s*(\S+)", text, re.M) + re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M)
        for uri in uris:
            is_security = "security" in uri
            if ("debian" in uri) and (is_security == (kind == "security")) and uri.rstrip("/") not in found:
                found.append(uri.rstrip("/"))
    return found or [DEFAULT_MIRRORS[kind]]


def verify_inrelease(data: bytes, keyring: Path = KEYRING) -> bytes:
    """The signed content of an InRelease file; raises unless gpgv accepts the signature."""
    with tempfile.TemporaryDirectory(prefix="learnerkit-gpgv-") as scratch:
        signed = Path(scratch) / "InRelease"
        signed.write_bytes(data)
        out = Path(scratch) / "content"
        proc = subprocess.run(
            ["gpgv", "--keyring", str(keyring), "--output", str(out), str(signed)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            raise DebianIndexError(f"InRelease signature rejected by gpgv ({keyring}): {proc.stderr.strip()[-300:]}")
        return out.read_bytes()


def parse_release(
    content: bytes, where: str, now: datetime
) -> tuple[datetime, datetime | None, dict[str, tuple[str, int]]]:
    release = Deb822(content.decode("utf-8", errors="replace").splitlines())
    try:
        date = parsedate_to_datetime(release["Date"])
    except (KeyError, TypeError, ValueError) as e:
        raise DebianIndexError(f"{where}: no valid Date field") from e
    valid_until = parsedate_to_datetime(release["Valid-Until"]) if release.get("Valid-Until") else None
    if valid_until is not None and valid_until < now:
        raise DebianIndexError(f"{where}: expired (Valid-Until {valid_until.isoformat()}): a replayed or stale index")
    hashes = {}
    for line in release.get("SHA256", "").splitlines():
        parts = line.split()
        if len(parts) == 3:
            hashes[parts[2]] = (parts[0], int(parts[1]))
    return date, valid_until, hashes


def _get(url: str) -> bytes:
    try:
        response = requests.get(url, timeout=TIMEOUT_S)
        response.raise_for_status()
    except requests.RequestException as e:
        raise DebianIndexError(f"fetching {url}: {e}") from e
    return response.content


@cache
def fetch_suite(mirror: str, suite: str, arch: str, keyring: Path = KEYRING) -> SuiteIndex:
    """Fetch and verify one suite's main Packages index (cached for the process: one fetch per scan run)."""
    base = f"{mirror}/dists/{suite}"
    return read_suite(_get(f"{base}/InRelease"), _get, mirror, suite, arch, keyring, datetime.now(UTC))


def read_suite(
    inrelease: bytes,
    get: Callable[[str], bytes],
    mirror: str,
    suite: str,
    arch: str,
    keyring: Path,
    now: datetime,
) -> SuiteIndex:
    """One suite's main Packages index from its InRelease (verified with gpgv, valid at `now`), the index read
    with `get` (a URL to bytes) and checked against the SHA256 and size the signed file names."""
    base = f"{mirror}/dists/{suite}"
    content = verify_inrelease(inrelease, keyring)
    date, valid_until, hashes = parse_release(content, f"{base}/InRelease", now)
    for name, decompress in (
        (f"main/binary-{arch}/Packages.xz", lzma.decompress),
        (f"main/binary-{arch}/Packages.gz", gzip.decompress),
    ):
        if name in hashes:
            data = get(f"{base}/{name}")
            digest, size = hashes[name]
            if hashlib.sha256(data).hexdigest() != digest or len(data) != size:
                raise DebianIndexError(f"{base}/{name}: SHA256 or size differs from the signed InRelease")
            packages = parse_packages(decompress(data).decode("utf-8", errors="replace"))
            return SuiteIndex(suite, mirror, date, valid_until, packages)
    raise DebianIndexError(f"{base}/InRelease lists no main/binary-{arch}/Packages index")


def parse_packages(text: str) -> dict[tuple[str, str], IndexEntry]:
    entries: dict[tuple[str, str], IndexEntry] = {}
    for para in Deb822.iter_paragraphs(text.splitlines()):
        source = para.get("Source", para["Package"]).split(" ")[0]
        entry = IndexEntry(
            para["Package"],
            para["Version"],
            para.get("Architecture", ""),
            source,
            para.get("Filename", ""),
            para.get("SHA256", ""),
            int(para.get("Size", "0")),
        )
        key = (entry.package, entry.architecture)
        if key not in entries or Version(entry.version) > Version(entries[key].version):
            entries[key] = entry
    return entries


def pending_updates(installed: list[DebPackage], index: SuiteIndex) -> list[tuple[DebPackage, IndexEntry]]:
    pending = []
    for package in installed:
        entry = index.packages.get((package.name, package.architecture))
        if entry is not None and Version(entry.version) > Version(package.version):
            pending.append((package, entry))
    return pending


def changelog_cves(deb: bytes, package: str, installed: str) -> list[str]:
    """CVE ids in the changelog entries of a .deb newer than the installed version."""
    for text in _changelogs(deb, package):
        cves: set[str] = set()
        for block in Changelog(text, strict=False):
            if block.version is not None and Version(str(block.version)) > Version(installed):
                cves.update(CVE.findall("\n".join(block.changes())))
        return sorted(cves)
    return []


def _changelogs(deb: bytes, package: str) -> Iterator[str]:
    for name, member in _ar_members(deb):
        if not name.startswith("data.tar"):
            continue
        with tarfile.open(fileobj=io.BytesIO(member), mode="r:*") as data:
            for info in data:
                if info.isfile() and re.fullmatch(
                    r"\.?/usr/share/doc/[^/]+/changelog\.Debian(\.[a-z0-9]+)?\.gz", info.name
                ):
                    handle = data.extractfile(info)
                    if handle is not None:
                        yield gzip.decompress(handle.read()).decode("utf-8", errors="replace")


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    if not data.startswith(b"!<arch>\n"):
        raise DebianIndexError("not a .deb (ar) archive")
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        yield name, data[offset + 60 : offset + 60 + size]
        offset += 60 + size + (size % 2)


def check_pending(
    installed: list[DebPackage] | None, codename: str | None, arch: str, *, with_changelogs: bool = True
) -> list[CheckResult]:
    """Two results: pending security updates (a FAIL) and pending stable updates (a WARN)."""
    sec_id, sec_title = "vuln.debian-security", "no pending Debian security updates"
    upd_id, upd_title = "vuln.debian-updates", "no pending Debian stable updates"
    if installed is None or not codename:
        why = "no dpkg status or no VERSION_CODENAME in /etc/os-release: not a Debian image"
        return [unknown(sec_id, sec_title, Severity.HIGH, why), unknown(upd_id, upd_title, Severity.LOW, why)]
    results = []
    for cid, title, severity, suite, kind in (
        (sec_id, sec_title, Severity.HIGH, f"{codename}-security", "security"),
        (upd_id, upd_title, Severity.LOW, f"{codename}-updates", "updates"),
    ):
        try:
            index = suite_index(kind, suite, arch)
            updates = _with_cves(pending_updates(installed, index), index, with_changelogs and kind == "security")
        except DebianIndexError as e:
            results.append(unknown(cid, title, severity, str(e)))
            continue
        evidence = [
            Evidence(
                f"{u.package} {u.installed} -> {u.available} ({u.suite}, source {u.source})"
                + (f": {', '.join(u.cves)}" if u.cves else "")
                + (f" [{u.note}]" if u.note else ""),
                path="/var/lib/dpkg/status",
                ids=(u.package, f"src:{u.source}", *u.cves),
            )
            for u in updates
        ]
        checked = f"{len(installed)} packages against {suite} of {index.date.date().isoformat()}"
        outcome = result(cid, title, severity, evidence, warn=kind == "updates")
        if outcome.status is Status.PASS:
            outcome = outcome.with_status(Status.PASS, [Evidence(checked)])
        results.append(outcome)
    return results


def suite_index(kind: str, suite: str, arch: str) -> SuiteIndex:
    """The suite's index from the first of this host's mirrors that serves a valid one."""
    errors = []
    for mirror in apt_mirrors(kind):
        try:
            return fetch_suite(mirror, suite, arch)
        except DebianIndexError as e:
            errors.append(str(e))
    raise DebianIndexError("; ".join(errors))


def _with_cves(pending: list[tuple[DebPackage, IndexEntry]], index: SuiteIndex, fetch: bool) -> list[PendingUpdate]:
    updates = []
    fetched: dict[str, list[str]] = {}
    for package, entry in pending:
        update = PendingUpdate(package.name, package.version, entry.version, entry.source, index.suite)
        if fetch and entry.source not in fetched and len(fetched) < MAX_CHANGELOGS and entry.size <= MAX_DEB_BYTES:
            deb = _get(f"{index.mirror}/{entry.filename}")
            if hashlib.sha256(deb).hexdigest() != entry.sha256:
                raise DebianIndexError(f"{index.mirror}/{entry.filename}: SHA256 differs from the signed index")
            fetched[entry.source] = changelog_cves(deb, package.name, package.version)
        if entry.source in fetched:
            update.cves = fetched[entry.source]
        else:
            update.note = "changelog not fetched"
        updates.append(update)
    return updates
