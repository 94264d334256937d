"""hadolint on the rendered Dockerfile, with the project's config and the HEALTHCHECK rule (DL3057) on."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from learnerkit.common.errors import LearnerkitError
from learnerkit_build.scan.lint import lint_dockerfile
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, result, unknown

HEALTHCHECK_RULE = "DL3057"


def check_dockerfile(name: str, dockerfile: str | None, config: Path | None) -> CheckResult:
    cid, title = "dockerfile.hadolint", "hadolint passes on the rendered Dockerfile (HEALTHCHECK rule on)"
    if dockerfile is None:
        return unknown(cid, title, Severity.MEDIUM, f"no Dockerfile for {name}: pass --dockerfile or scan a SPEC")
    settings: dict[str, object] = {}
    if config is not None and config.is_file():
        settings = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    override = dict(settings.get("override") or {})  # type: ignore[call-overload]
    override["warning"] = sorted({*override.get("warning", []), HEALTHCHECK_RULE})
    settings["override"] = override
    settings["ignored"] = [rule for rule in settings.get("ignored", []) or [] if rule != HEALTHCHECK_RULE]  # type: ignore[attr-defined]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as handle:
        yaml.safe_dump(settings, handle)
        handle.flush()
        try:
            report = lint_dockerfile(name, dockerfile, Path(handle.name))
        except LearnerkitError as e:
            return unknown(cid, title, Severity.MEDIUM, str(e))
    # hadolint asks every stage for a HEALTHCHECK; only the final stage's matters in the image.
    last_from = max(
        (n for n, line in enumerate(dockerfile.splitlines(), 1) if line.upper().startswith("FROM ")), default=0
    )
    evidence = [
        Evidence(f"{f.code} ({f.level}) line {f.line}: {f.message}", path="Dockerfile", ids=(f.code,))
        for f in report.findings
        if not (f.code == HEALTHCHECK_RULE and f.line < last_from)
    ]
    return result(cid, title, Severity.MEDIUM, evidence)
