"""The gate: a policy (severity threshold, which checks are errors) and an allowlist whose entries expire."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from learnerkit.common.errors import ConfigError
from learnerkit_build.scan.checks_config import DEFAULT_LABELS, ConfigPolicy
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status
from learnerkit_build.scan.osv import DEFAULT_CANARIES, Canary, OsvPolicy

VEX_JUSTIFICATIONS = frozenset(
    {
        "component_not_present",
        "vulnerable_code_not_present",
        "vulnerable_code_not_in_execute_path",
        "vulnerable_code_cannot_be_controlled_by_adversary",
        "inline_mitigations_already_exist",
    }
)


@dataclass(frozen=True)
class Policy:
    severity_threshold: Severity = Severity.HIGH
    """FAIL evidence at or above this severity blocks the gate."""
    errors: tuple[str, ...] = ()
    """Checks whose FAIL or WARN blocks the gate whatever their severity."""
    unknown_fails: tuple[str, ...] = ()
    """Checks whose UNKNOWN blocks the gate (`*` for all)."""
    config: ConfigPolicy = field(default_factory=ConfigPolicy)
    osv: OsvPolicy = field(default_factory=OsvPolicy)
    debian_changelogs: bool = True


@dataclass(frozen=True)
class AllowEntry:
    id: str
    scope: str
    """A glob over the image reference (e.g. `learnerkit/*`)."""
    reason: str
    review_by: date
    path: str | None = None
    """Optional glob over the evidence path."""
    justification: str | None = None
    """One of OpenVEX's not_affected justifications, carried into the VEX of the images it covers."""


@dataclass(frozen=True)
class Blocker:
    check: str
    severity: str
    message: str
    path: str | None = None


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    threshold: str
    blockers: list[Blocker]
    expired: list[AllowEntry]


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: {e}") from e


def load_policy(path: Path | None) -> Policy:
    if path is None:
        return Policy()
    raw = _load_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a policy is a mapping")
    known = {
        "severity_threshold",
        "errors",
        "unknown_fails",
        "require_healthcheck",
        "required_labels",
        "secret_env_allow",
        "osv",
        "debian_changelogs",
    }
    if extra := sorted(set(raw) - known):
        raise ConfigError(f"{path}: unknown field(s) {', '.join(extra)}; valid: {', '.join(sorted(known))}")
    try:
        osv_raw = raw.get("osv") or {}
        osv = OsvPolicy(
            max_age_days=int(osv_raw.get("max_age_days", 7)),
            ignore_unfixed=bool(osv_raw.get("ignore_unfixed", True)),
            default_severity=Severity.parse(str(osv_raw.get("default_severity", "high"))),
            canaries=tuple(Canary(**c) for c in osv_raw["canaries"]) if "canaries" in osv_raw else DEFAULT_CANARIES,
        )
        return Policy(
            severity_threshold=Severity.parse(str(raw.get("severity_threshold", "high"))),
            errors=tuple(raw.get("errors") or ()),
            unknown_fails=tuple(raw.get("unknown_fails") or ()),
            config=ConfigPolicy(
                require_healthcheck=bool(raw.get("require_healthcheck", True)),
                required_labels=tuple(raw.get("required_labels", DEFAULT_LABELS)),
                secret_env_allow=tuple(raw.get("secret_env_allow") or ()),
            ),
            osv=osv,
            debian_changelogs=bool(raw.get("debian_changelogs", True)),
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: {e}") from e


def load_allowlist(path: Path | None) -> list[AllowEntry]:
    if path is None:
        return []
    raw = _load_yaml(path) or []
    items = raw.get("allow", []) if isinstance(raw, dict) else raw
    entries = []
    for number, item in enumerate(items, 1):
        missing = [key for key in ("id", "scope", "reason", "review_by") if not item.get(key)]
        if missing:
            raise ConfigError(f"{path}: entry {number} lacks {', '.join(missing)}")
        review_by = item["review_by"]
        if not isinstance(review_by, date):
            try:
                review_by = date.fromisoformat(str(review_by))
            except ValueError as e:
                raise ConfigError(f"{path}: entry {number}: review_by {review_by!r} is not YYYY-MM-DD") from e
        justification = item.get("justification")
        if justification is not None and justification not in VEX_JUSTIFICATIONS:
            raise ConfigError(
                f"{path}: entry {number}: justification {justification!r} is not one of "
                f"{', '.join(sorted(VEX_JUSTIFICATIONS))}"
            )
        entries.append(
            AllowEntry(
                str(item["id"]), str(item["scope"]), str(item["reason"]), review_by, item.get("path"), justification
            )
        )
    return entries


def _entry_matches(entry: AllowEntry, check: CheckResult, evidence: Evidence, reference: str) -> bool:
    if not fnmatch.fnmatchcase(reference, entry.scope):
        return False
    if entry.id != check.id and entry.id not in evidence.ids:
        return False
    return entry.path is None or (evidence.path is not None and fnmatch.fnmatchcase(evidence.path, entry.path))


def apply_allowlist(
    results: list[CheckResult], entries: list[AllowEntry], reference: str, today: date
) -> tuple[list[CheckResult], list[AllowEntry]]:
    """Mark evidence that a live entry accepts; return the results and the in-scope entries past review_by."""
    live = [e for e in entries if e.review_by >= today]
    expired = [e for e in entries if e.review_by < today and fnmatch.fnmatchcase(reference, e.scope)]
    marked = []
    for check in results:
        evidence = []
        for item in check.evidence:
            entry = next((e for e in live if _entry_matches(e, check, item, reference)), None)
            evidence.append(
                replace(
                    item,
                    allowed_by=f"{entry.id}: {entry.reason} (review by {entry.review_by})",
                    justification=entry.justification,
                )
                if entry
                else item
            )
        marked.append(check.with_status(check.status, evidence))
    return marked, expired


def decide(results: list[CheckResult], expired: list[AllowEntry], policy: Policy) -> GateDecision:
    blockers = [
        Blocker("allowlist.expired", "high", f"allowlist entry {e.id} ({e.scope}) passed its review_by {e.review_by}")
        for e in expired
    ]
    for check in results:
        if check.status is Status.UNKNOWN:
            if "*" in policy.unknown_fails or check.id in policy.unknown_fails:
                blockers.append(Blocker(check.id, check.severity.label(), _first(check.evidence)))
            continue
        if check.status not in (Status.FAIL, Status.WARN):
            continue
        for item in check.evidence:
            if item.allowed_by:
                continue
            severity = item.severity if item.severity is not None else check.severity
            is_error = check.id in policy.errors
            if is_error or (check.status is Status.FAIL and severity >= policy.severity_threshold):
                blockers.append(Blocker(check.id, severity.label(), item.message, item.path))
    return GateDecision(not blockers, policy.severity_threshold.label(), blockers, expired)


def _first(evidence: list[Evidence]) -> str:
    return evidence[0].message if evidence else "no evidence"
