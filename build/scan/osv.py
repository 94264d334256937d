"""Known vulnerabilities from an offline OSV database the user supplies (a folder of JSON or the ecosystem zips).

Debian entries are matched by source package with Debian version ordering, PyPI entries by PEP 440. The data
is trusted only when it is there, recent enough, and flags each canary: a package version that any complete
database must report. Otherwise the result is UNKNOWN, never a clean pass.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from debian.debian_support import Version as DebVersion
from packaging.version import InvalidVersion
from packaging.version import Version as PyVersion

from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status, result, unknown
from learnerkit_build.scan.packages import DebPackage, PythonDist

SEVERITY_WORDS = {
    "CRITICAL": Severity.CRITICAL,
    "HIGH": Severity.HIGH,
    "MODERATE": Severity.MEDIUM,
    "MEDIUM": Severity.MEDIUM,
    "LOW": Severity.LOW,
}


@dataclass(frozen=True)
class Canary:
    ecosystem: str
    """Debian or PyPI."""
    package: str
    version: str


DEFAULT_CANARIES = (Canary("Debian", "openssl", "3.0.0-1"), Canary("PyPI", "jinja2", "2.10"))


@dataclass(frozen=True)
class OsvPolicy:
    max_age_days: int = 7
    ignore_unfixed: bool = True
    default_severity: Severity = Severity.HIGH
    canaries: tuple[Canary, ...] = DEFAULT_CANARIES


@dataclass
class OsvDatabase:
    source: str
    entries: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    """By (ecosystem base, normalised package name)."""
    newest: datetime | None = None
    count: int = 0


def normalise(ecosystem: str, name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower() if ecosystem == "PyPI" else name


def _records(path: Path) -> Iterator[tuple[str, bytes]]:
    if path.is_file() and path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith(".json"):
                    yield f"{path}:{name}", archive.read(name)
    elif path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.suffix == ".json" and child.is_file():
                yield str(child), child.read_bytes()
            elif child.suffix == ".zip" and child.is_file():
                yield from _records(child)


def load_database(path: Path) -> OsvDatabase:
    db = OsvDatabase(source=str(path))
    for where, raw in _records(path):
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(entry, dict) or "id" not in entry:
            continue
        db.count += 1
        modified = _parse_time(entry.get("modified"))
        if modified and (db.newest is None or modified > db.newest):
            db.newest = modified
        for affected in entry.get("affected", []):
            package = affected.get("package") or {}
            ecosystem = str(package.get("ecosystem", "")).split(":")[0]
            if ecosystem in ("Debian", "PyPI") and package.get("name"):
                db.entries[(ecosystem, normalise(ecosystem, package["name"]))].append(
                    {"entry": entry, "affected": affected, "where": where}
                )
    return db


def _parse_time(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


Parse = Callable[[str], Any]


def _in_ranges(version: str, affected: dict[str, Any], parse: Parse, ignore_unfixed: bool) -> tuple[bool, str]:
    """(affected?, fixed version or "") under OSV's ECOSYSTEM ranges and explicit versions."""
    if version in affected.get("versions", []):
        return True, ""
    try:
        current = parse(version)
    except (InvalidVersion, ValueError):
        return False, ""
    for rng in affected.get("ranges", []):
        if rng.get("type") != "ECOSYSTEM":
            continue
        events = []
        for event in rng.get("events", []):
            for kind, value in event.items():
                if kind in ("introduced", "fixed", "last_affected"):
                    try:
                        events.append((parse("0") if value == "0" else parse(value), kind, value))
                    except (InvalidVersion, ValueError):
                        continue
        status, fixed = False, ""
        for point, kind, value in sorted(events, key=lambda e: e[0]):
            if kind == "introduced" and current >= point:
                status = True
            elif (kind == "fixed" and current >= point) or (kind == "last_affected" and current > point):
                status = False
            elif kind == "fixed" and status and not fixed:
                fixed = value
        has_fix = any(kind == "fixed" for _, kind, _ in events)
        if status and (has_fix or not ignore_unfixed):
            return True, fixed
    return False, ""


def _severity(entry: dict[str, Any], default: Severity) -> Severity:
    words = [str((entry.get("database_specific") or {}).get("severity", "")).upper()]
    words += [str((a.get("ecosystem_specific") or {}).get("severity", "")).upper() for a in entry.get("affected", [])]
    found = [SEVERITY_WORDS[w] for w in words if w in SEVERITY_WORDS]
    return max(found) if found else default


def _parser(ecosystem: str) -> Parse:
    return DebVersion if ecosystem == "Debian" else PyVersion


def matches(db: OsvDatabase, ecosystem: str, name: str, version: str, policy: OsvPolicy) -> list[Evidence]:
    evidence = []
    for item in db.entries.get((ecosystem, normalise(ecosystem, name)), []):
        hit, fixed = _in_ranges(version, item["affected"], _parser(ecosystem), policy.ignore_unfixed)
        if hit:
            entry = item["entry"]
            ids = (str(entry["id"]), *(str(a) for a in entry.get("aliases", [])))
            fix = f", fixed in {fixed}" if fixed else ", no fix"
            evidence.append(
                Evidence(
                    f"{ids[0]}: {ecosystem} {name} {version}{fix}",
                    ids=(*ids, name),
                    severity=_severity(entry, policy.default_severity),
                )
            )
    return evidence


def check_osv(
    db_path: Path | None,
    debs: list[DebPackage] | None,
    dists: list[PythonDist],
    policy: OsvPolicy,
    now: datetime | None = None,
) -> CheckResult:
    cid, title = "vuln.osv", "no known vulnerabilities in the offline OSV database"
    if db_path is None:
        return unknown(cid, title, Severity.HIGH, "no OSV database given (--osv-db): vulnerabilities not matched")
    if not db_path.exists():
        return unknown(cid, title, Severity.HIGH, f"OSV database {db_path} does not exist")
    db = load_database(db_path)
    if db.count == 0:
        return unknown(cid, title, Severity.HIGH, f"OSV database {db_path} holds no records")
    now = now or datetime.now(UTC)
    if db.newest is None or now - db.newest > timedelta(days=policy.max_age_days):
        newest = db.newest.date().isoformat() if db.newest else "never"
        return unknown(
            cid,
            title,
            Severity.HIGH,
            f"OSV database {db_path} is stale: newest record modified {newest}, policy allows "
            f"{policy.max_age_days} days",
        )
    ecosystems = {eco for eco, _ in db.entries}
    for canary in policy.canaries:
        if not matches(db, canary.ecosystem, canary.package, canary.version, policy):
            return unknown(
                cid,
                title,
                Severity.HIGH,
                f"OSV database {db_path} does not flag the canary {canary.ecosystem} {canary.package} "
                f"{canary.version}: incomplete data or broken matching",
            )
    evidence = []
    for package in debs or []:
        for ev in matches(db, "Debian", package.source, package.source_version, policy):
            evidence.append(
                Evidence(
                    f"{ev.message} (binary {package.name})",
                    path="/var/lib/dpkg/status",
                    ids=(*ev.ids, package.name),
                    severity=ev.severity,
                )
            )
    for dist in dists:
        evidence += [
            Evidence(ev.message, path=dist.path, ids=ev.ids, severity=ev.severity)
            for ev in matches(db, "PyPI", dist.name, dist.version, policy)
        ]
    outcome = result(cid, title, Severity.HIGH, evidence)
    if outcome.status is Status.PASS:
        scope = ", ".join(sorted(ecosystems))
        return outcome.with_status(Status.PASS, [Evidence(f"{db.count} records ({scope}) of {db.newest:%Y-%m-%d}")])
    return outcome
