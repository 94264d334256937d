"""Every table of the `image`, `scan`, `sidecar`, `model`, `sweep`, `job`, `scheduler` and `dev` groups rendered at
80 columns (a pipe's width, a small terminal's) with long but real values: no header and no status word is broken
onto two lines, no id or path a user copies is cut, no line is wider than 80."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console, RenderableType

from learnerkit.cli import cli
from learnerkit.dev.cli_dev import status_table
from learnerkit.dev.environment import ServiceStatus
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.cli_scheduler import nodes_table
from learnerkit.scheduler.cli_sweep import parameters_view
from learnerkit.scheduler.client.sweeptables import rungs_table, sweeps_table, trials_table
from learnerkit.scheduler.client.terminal import job_details, jobs_table, metrics_table
from learnerkit.scheduler.facade import AttemptView, EvaluationView, JobView, LearnerView, SweepView, TrialView
from learnerkit.scheduler.nodes.listing import NodeJob, NodeRow, NodeState
from learnerkit_build import views
from learnerkit_build.builds.images import BuildResult
from learnerkit_build.builds.locking import LockResult
from learnerkit_build.scan.lint import LintFinding, LintReport
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, Status
from learnerkit_build.scan.policy import GateDecision
from learnerkit_build.scan.reports import report_table
from learnerkit_build.scan.runner import ScanReport

JOB = "job-3f9c2a71b8d4"
"""The scheduler's ids: ``job-`` and 12 hex digits; a sweep's trials ``sweep-<8 hex>-t<4 digits>``."""
LONGEST = "explainability:0.9-cpu"
"""The longest spec of the matrix."""
MANIFEST = """\
name: resnet50 on an imagenet subset, with a name long enough to wrap
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: training-data-of-team-a}
    training_results: {container: training-results-of-team-a}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: "key", password: "secret"}
framework:
  name: pytorch
  version: "2.13"
  command: python train.py --epochs 3
"""
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def at_80(renderable: RenderableType) -> str:
    console = Console(width=80, record=True, force_terminal=False)
    console.print(renderable)
    return console.export_text()


def whole(text: str, *words: str) -> None:
    """Each word on one line of ``text``, as itself (not broken between lines, not ended by an ellipsis)."""
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text, text
    for word in words:
        assert re.search(rf"(?<![\w/.:-]){re.escape(word)}(?![\w/.:-])", text), f"{word!r} broken or cut in\n{text}"


def lock_rows() -> list[dict[str, Any]]:
    return [
        {
            "name": "explainability:0.9-cpu",
            "path": "frameworks/explainability/lock/0.9-cpu.json",
            "debian": 214,
            "python": 112,
            "status": "unchanged",
        },
        {
            "name": "sidecar",
            "path": "controller_sidecar/image/lock.json",
            "debian": 9,
            "python": 31,
            "status": "written",
        },
        {
            "name": "pytorch:2.13-cuda",
            "path": "",
            "debian": 0,
            "python": 0,
            "status": "refused: installs outside variant.pip (a framework_install of its own): not lockable",
        },
    ]


def scan_report() -> ScanReport:
    evidence = [Evidence("CVE-2026-12345 in libssl3 3.0.15-1~deb12u1", path="/usr/lib/x86_64-linux-gnu/libssl.so.3")]
    checks = [
        CheckResult("vulnerabilities", "known CVEs", Status.FAIL, Severity.CRITICAL, evidence),
        CheckResult("secrets", "no secrets", Status.UNKNOWN, Severity.HIGH, []),
        CheckResult("user", "non-root user", Status.PASS, Severity.MEDIUM, []),
    ]
    return ScanReport(
        "learnerkit/explainability:0.9-cpu-py3.11", "explainability:0.9-cpu", "sha256:" + "ab" * 32,
        "2026-11-29T12:00:00Z", 12.3, 10, checks, GateDecision(False, "high", [], []), {},
    )  # fmt: skip


def job() -> JobView:
    return JobView(
        JOB,
        "team-a",
        "resnet50 on imagenet-subset",
        "PREEMPTED",
        reason="preempted by a job of higher priority; queued again",
        submitted_at="2026-11-29T11:00:00+00:00",
        learners=(LearnerView(1, "CHECKPOINTING", "saving step 12000", None, {"loss": 0.1234, "acc": 0.97}, True),),
        evaluations=(EvaluationView("fairness-gate", "fairness", "inconclusive", "no protected attribute"),),
        attempts=(
            AttemptView(2, ("node-gpu-a100-07",), ended_by="PREEMPTED", reason="a higher priority job", resumed_from=1,
                        checkpoint_digest="sha256:" + "cd" * 32, work_lost_s=42.0, steps_lost=120),
        ),
        model="not evaluated",
    )  # fmt: skip


def sweep() -> SweepView:
    trials = tuple(
        TrialView(i, f"sweep-3f9c2a71-t{i:04d}", "promoted", 3, 81, (0.25, 0.125), "in the top third of rung 2")
        for i in range(2)
    )
    return SweepView(
        "sweep-3f9c2a71", "team-a", "running", "", "hyperband", "validation_loss", "minimize", "epoch",
        (1, 3, 9, 27, 81), 64, 8, "2026-11-29T11:00:00+00:00", trials,
    )  # fmt: skip


TABLES: dict[str, tuple[Callable[[], RenderableType], tuple[str, ...]]] = {
    "image lock": (
        lambda: views.lock_table([LockResult(**row) for row in lock_rows()]),
        ("explainability:0.9-cpu", "frameworks/explainability/lock/0.9-cpu.json", "controller_sidecar/image/lock.json",
         "debian", "python", "status", "unchanged", "written", "refused:"),
    ),
    "image prune": (
        lambda: views.simple_table(
            [{"tag": "learnerkit/explainability:0.9-cpu-py3.11-0123456789ab", "status": "would remove"}], "tag"
        ),
        ("learnerkit/explainability:0.9-cpu-py3.11-0123456789ab", "status", "would"),
    ),
    "image base": (
        lambda: views.base_table([{"base": "sidecar-bookworm", "image_id": "sha256:" + "ab" * 32, "status": "cached"}]),
        ("ab" * 6, "sidecar-bookworm", "image_id", "status", "cached"),
    ),
    "image build": (
        lambda: views.build_table([BuildResult("explainability:0.9-cpu", "cached", f"learnerkit/{LONGEST}-py3.11",
                                               seconds=1234.5)]),
        ("explainability:0.9-cpu", "learnerkit/explainability:0.9-cpu-py3.11", "cached", "seconds", "status"),
    ),
    "image test": (
        lambda: views.test_table([type("R", (), {"spec": "explainability:0.9-cpu", "checks": [
            type("C", (), {"name": "python_version", "status": "skip", "detail": "no GPU on this host"})()]})()]),
        ("explainability:0.9-cpu", "python_version", "skip", "result", "detail"),
    ),
    "scan": (lambda: report_table(scan_report()), ("vulnerabilities", "UNKNOWN", "critical", "severity", "evidence")),
    "job list": (lambda: jobs_table([job()], NOW, 80), (JOB, "PREEMPTED", "learners", "status")),
    "job status": (
        lambda: job_details(job()),
        (JOB, "CHECKPOINTING", "PREEMPTED", "fairness-gate", "inconclusive", "node-gpu-a100-07", "attempt", "learner",
         "evaluation", "outcome", "message", "metrics", "resumed", "ended"),
    ),
    "job metrics": (
        lambda: metrics_table(JOB, 1, [{"step": 120000, "time": 1.8e9, "values": {"validation_accuracy_top5": 0.5}}]),
        ("120000", "validation_accuracy_top5", "2027-01-15 08:00:00", "metric", "value", "step"),
    ),
    "sweep list": (lambda: sweeps_table([sweep()]), ("sweep-3f9c2a71", "running", "hyperband", "algorithm", "objective",
                                                     "trials", "reason", "validation_loss")),
    "sweep rungs": (lambda: rungs_table(sweep()), ("rung", "budget", "reported", "training", "paused", "best")),
    "sweep trials": (lambda: trials_table(sweep()), ("sweep-3f9c2a71-t0001", "promoted", "trial", "state", "rung",
                                                     "validation_loss")),
    "image lint": (
        lambda: views.lint_table([LintReport("explainability:0.9-cpu", [LintFinding(12, "DL3008", "warning",
                                  "Pin versions in apt get install. Instead of `apt-get install <p>` use ...")])]),
        ("explainability:0.9-cpu", "FAIL", "DL3008", "warning:", "result", "findings"),
    ),
    "sweep validate": (
        lambda: parameters_view(
            ["learning_rate", "weight_decay", "warmup_steps", "optimizer", "dropout", "label_smoothing"],
            [{"learning_rate": 0.000123456, "weight_decay": 0.01, "warmup_steps": 1000, "optimizer": "adamw",
              "dropout": 0.1, "label_smoothing": 0.05}],
            80,
        ),
        ("learning_rate", "weight_decay", "warmup_steps", "optimizer", "label_smoothing", "0.0001235", "adamw"),
    ),
    "scheduler nodes": (
        lambda: nodes_table([NodeRow("worker-gpu-a100-node-07", NodeState.NOT_READY,
                                     (NodeJob(JOB, "team-a", "CHECKPOINTING"),))]),
        ("worker-gpu-a100-node-07", "not-ready", JOB, "CHECKPOINTING", "TENANT", "STATUS", "STATE"),
    ),
    "dev status": (
        lambda: status_table([ServiceStatus("prometheus", "running", True, 123456, "http://127.0.0.1:49152",
                                            action="already running")]),
        ("prometheus", "running", "123456", "http://127.0.0.1:49152", "healthy", "endpoint", "already"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_word_is_broken_and_no_id_cut_at_80_columns(name: str) -> None:
    draw, words = TABLES[name]
    whole(at_80(draw()), *words)


def test_the_token_list_and_a_valid_manifest_read_whole_at_80_columns(tmp_path: Path) -> None:
    tokens = tmp_path / "a-folder-with-a-rather-long-name" / "tokens.json"
    tokens.parent.mkdir()
    add_token(tokens, "team-with-a-long-tenant-name", role="operator")
    listed = CliRunner().invoke(cli, ["scheduler", "token", "list", "--tokens", str(tokens)], env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    whole(listed.output, "team-with-a-long-tenant-name", "operator", "created_at", "tenant", "role")
    manifest = tmp_path / "manifest.yml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    valid = CliRunner().invoke(cli, ["job", "validate", str(manifest)], env={"COLUMNS": "80"})
    assert valid.exit_code == 0, valid.output
    whole(valid.output, "framework", "learners", "training-results-of-team-a", "scheduling")
