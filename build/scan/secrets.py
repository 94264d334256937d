"""Secrets in every layer, deleted ones included: private keys, cloud keys, tokens.

Each rule has literal keywords that must occur before its regex runs, so most files cost a few substring
searches. Binary files (a NUL byte in the first 8 KiB) and files above the layer index's size limit are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from learnerkit_build.scan.layers import FileEntry, ImageIndex
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, result


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    keywords: tuple[bytes, ...]
    pattern: re.Pattern[bytes]


def _rule(rule_id: str, title: str, keywords: tuple[str, ...], pattern: str) -> Rule:
    return Rule(rule_id, title, tuple(k.encode() for k in keywords), re.compile(pattern.encode()))


RULES = (
    _rule(
        "private-key",
        "private key",
        ("PRIVATE KEY",),
        r"-----BEGIN (RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY( BLOCK)?-----\s*[A-Za-z0-9+/=:\n\r -]{40,}",
    ),
    _rule("aws-access-key-id", "AWS access key ID", ("AKIA", "ASIA"), r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    _rule(
        "aws-secret-access-key",
        "AWS secret access key",
        ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
        r"(?i)aws_secret_access_key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}\b",
    ),
    _rule(
        "gcp-service-account",
        "GCP service account key",
        ("service_account",),
        r"\"type\"\s*:\s*\"service_account\"[\s\S]{0,2000}\"private_key\"",
    ),
    _rule("google-api-key", "Google API key", ("AIza",), r"\bAIza[0-9A-Za-z_-]{35}\b"),
    _rule("azure-storage-key", "Azure storage account key", ("AccountKey=",), r"AccountKey=[A-Za-z0-9+/]{86}=="),
    _rule("github-token", "GitHub token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{36}\b"),
    _rule(
        "github-fine-grained-token", "GitHub fine-grained token", ("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{82}\b"
    ),
    _rule("gitlab-token", "GitLab personal access token", ("glpat-",), r"\bglpat-[A-Za-z0-9_-]{20}\b"),
    _rule(
        "slack-token",
        "Slack token",
        ("xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"),
        r"\bxox[bpars]-[0-9]{8,}-[A-Za-z0-9-]{10,}",
    ),
    _rule(
        "slack-webhook",
        "Slack webhook URL",
        ("hooks.slack.com",),
        r"https://hooks\.slack\.com/services/T[A-Z0-9]{8,}/B[A-Z0-9]{8,}/[A-Za-z0-9]{24}",
    ),
    _rule("stripe-secret-key", "Stripe secret key", ("sk_live_", "rk_live_"), r"\b[sr]k_live_[0-9A-Za-z]{24,}\b"),
    _rule("pypi-token", "PyPI upload token", ("pypi-AgE",), r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    _rule("npm-token", "npm access token", ("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b"),
    _rule("huggingface-token", "Hugging Face token", ("hf_",), r"\bhf_[A-Za-z]{34}\b"),
    _rule("openai-key", "OpenAI API key", ("T3BlbkFJ",), r"\bsk-[A-Za-z0-9_-]{20,}T3BlbkFJ[A-Za-z0-9_-]{20,}"),
    _rule("sendgrid-key", "SendGrid API key", ("SG.",), r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b"),
    _rule("jwt", "JSON web token", ("eyJ",), r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{20,}"),
    _rule(
        "docker-registry-auth",
        "registry credentials (docker config.json)",
        ('"auths"',),
        r"\"auth\"\s*:\s*\"[A-Za-z0-9+/]{12,}={0,2}\"",
    ),
    _rule(
        "netrc-password", "password in a .netrc", ("machine",), r"(?m)^\s*machine\s+\S+\s+login\s+\S+\s+password\s+\S+"
    ),
    _rule(
        "basic-auth-url",
        "password in a URL",
        ("://",),
        r"\b(https?|ftp|postgres(ql)?|mysql|mongodb(\+srv)?|redis|amqp)://[A-Za-z0-9._%-]{2,}:"
        r"(?!password@|pass@|secret@|PASSWORD@|\*+@|\$)[A-Za-z0-9._%!~-]{6,}@[A-Za-z0-9.-]+",
    ),
)


@dataclass(frozen=True)
class SecretHit:
    rule: str
    title: str
    path: str
    layer: int
    line: int


@dataclass
class SecretScanner:
    """A layer-index visitor that records every rule hit with its path and layer."""

    hits: list[SecretHit] = field(default_factory=list)
    skip_prefixes: tuple[str, ...] = ("/usr/share/doc/", "/usr/share/common-licenses/")

    def __call__(self, entry: FileEntry, data: bytes) -> None:
        if not data or b"\0" in data[:8192] or entry.path.startswith(self.skip_prefixes):
            return
        for rule in RULES:
            if not any(keyword in data for keyword in rule.keywords):
                continue
            match = rule.pattern.search(data)
            if match:
                line = data.count(b"\n", 0, match.start()) + 1
                self.hits.append(SecretHit(rule.id, rule.title, entry.path, entry.layer, line))


def scan_text(text: str) -> list[str]:
    """Rule ids that match a string (an ENV value, a label)."""
    data = text.encode()
    return [rule.id for rule in RULES if any(k in data for k in rule.keywords) and rule.pattern.search(data)]


def secret_checks(index: ImageIndex, hits: list[SecretHit]) -> list[CheckResult]:
    """Secrets still in the final file system, and secrets a later layer deleted (still in the image)."""
    present: list[Evidence] = []
    deleted: list[Evidence] = []
    for hit in hits:
        final = index.files.get(hit.path)
        evidence = Evidence(
            f"{hit.title} at line {hit.line}",
            path=hit.path,
            layer=hit.layer,
            history=index.history_of(hit.layer),
            ids=(f"secret:{hit.rule}",),
        )
        (present if final is not None and final.layer == hit.layer else deleted).append(evidence)
    env_hits = []
    for item in index.container_config.get("Env") or []:
        name, _, value = str(item).partition("=")
        env_hits += [Evidence(f"ENV {name} holds a {rule}", ids=(f"secret:{rule}",)) for rule in scan_text(value)]
    return [
        result("secrets.present", "no secrets in the final file system or ENV", Severity.CRITICAL, present + env_hits),
        result(
            "secrets.deleted",
            "no secrets in lower layers (deleted later, still in the image)",
            Severity.CRITICAL,
            deleted,
        ),
    ]
