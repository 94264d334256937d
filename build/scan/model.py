"""Scan results: a check's status, its evidence, and the severities a policy compares."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum


class Status(StrEnum):
    PASS = "PASS"  # noqa: S105 (a status, not a password)
    FAIL = "FAIL"
    WARN = "WARN"
    UNKNOWN = "UNKNOWN"
    """The input a check needs is missing or unusable: never reported as a pass."""


class Severity(IntEnum):
    INFO = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r}; valid: {', '.join(s.name.lower() for s in cls)}") from None

    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Evidence:
    """One reason for a status: what, where (path, layer) and which history line made it."""

    message: str
    path: str | None = None
    layer: int | None = None
    history: str | None = None
    ids: tuple[str, ...] = ()
    """Identifiers an allowlist entry may name besides the check id: CVE ids, secret rule ids, packages."""
    allowed_by: str | None = None
    """The allowlist entry's reason when this evidence was accepted."""
    justification: str | None = None
    """The accepting entry's OpenVEX justification, if it gives one."""
    severity: Severity | None = None
    """Its own severity (a vulnerability's), else the check's."""


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    status: Status
    severity: Severity
    evidence: list[Evidence] = field(default_factory=list)

    def with_status(self, status: Status, evidence: list[Evidence]) -> CheckResult:
        return CheckResult(self.id, self.title, status, self.severity, evidence)


def result(
    check_id: str, title: str, severity: Severity, evidence: list[Evidence], *, warn: bool = False
) -> CheckResult:
    """PASS without evidence, else FAIL (or WARN for advisory checks)."""
    if not evidence:
        return CheckResult(check_id, title, Status.PASS, severity, [])
    return CheckResult(check_id, title, Status.WARN if warn else Status.FAIL, severity, evidence)


def unknown(check_id: str, title: str, severity: Severity, why: str) -> CheckResult:
    return CheckResult(check_id, title, Status.UNKNOWN, severity, [Evidence(why)])
