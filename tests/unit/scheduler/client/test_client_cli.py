"""`learnerkit job ...` and `learnerkit scheduler token ...` against the API served by uvicorn on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import read_tokens
from learnerkit.scheduler.cli_job import _events_of
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.client.provenance import evaluation_data_hasher
from learnerkit.scheduler.errors import AuthError, JobNotFoundError, SchedulerUnreachableError
from learnerkit.scheduler.facade import (
    MAX_PAGE_JOBS,
    AttemptView,
    EvaluationReport,
    EvaluationReports,
    EvaluationView,
    LearnerView,
    StoredFile,
)
from learnerkit.scheduler.provenance.verify import DataAnswer
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.console.test_sweeps_views import sweep
from tests.unit.scheduler.fakefacade import MANIFEST, WAIT_REASON, FakeFacade, view
from tests.waiting import wait_until

FAST = ("--interval", "0.01")
LOG = b"epoch 1 loss 0.9\nepoch 2 loss 0.5\nepoch 3 loss 0.2\n"


@pytest.fixture
def url(fake: FakeFacade, tenants: Tenants) -> Iterator[str]:
    """The app with the fake facade, served by uvicorn in a thread on a free loopback port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(fake, tenants.path), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def run(url: str, token: str, *args: str) -> tuple[int, str]:
    env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": token}
    result = CliRunner().invoke(cli, ["job", *args], env=env)
    return result.exit_code, result.output


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "manifest.yml"
    path.write_text(MANIFEST.format(gpus=1))
    return path


def test_submit(url: str, tenants: Tenants, manifest: Path) -> None:
    code, out = run(url, tenants.a, "submit", str(manifest))
    assert code == 0, out
    assert "submitted job job-1: QUEUED" in out
    code, out = run(url, tenants.a, "submit", str(manifest), "-o", "json")
    assert code == 0, out
    job = json.loads(out)
    assert (job["job_id"], job["tenant"], job["gpus"]) == ("job-2", "team-a", 2)


def test_submit_reports_every_problem_with_its_line(url: str, tenants: Tenants, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(MANIFEST.format(gpus=-1).replace("memory: 1Gb", "memory: lots"))
    code, out = run(url, tenants.a, "submit", str(bad))
    assert code == 1
    assert "bad.yml:3: gpus:" in out
    assert "bad.yml:5: memory:" in out
    code, out = run(url, tenants.a, "submit", str(bad), "-o", "json")
    assert code == 1
    body = json.loads(out)
    assert {(p["field"], p["line"]) for p in body["problems"]} >= {("gpus", 3), ("memory", 5)}


def test_submit_follow_shows_progress_until_completed(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path
) -> None:
    fake.after_submit = ["PENDING", "PROCESSING", "PROCESSING", "STORING", "COMPLETED"]
    code, out = run(url, tenants.a, "submit", str(manifest), "--follow", *FAST)
    assert code == 0, out
    assert "COMPLETED" in out
    code, out = run(url, tenants.a, "submit", str(manifest), "--follow", "-o", "json", *FAST)
    assert code == 0, out
    statuses = [json.loads(line)["status"] for line in out.splitlines()]
    assert statuses == ["QUEUED", "PENDING", "PROCESSING", "STORING", "COMPLETED"], "one line per change"


def test_follow_exits_1_when_the_job_fails(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    failed = view("a-1", "team-a", status="FAILED", reason="learner 1 exited with 3")
    fake.add(view("a-1", "team-a", status="PROCESSING"), script=[failed])
    code, out = run(url, tenants.a, "status", "a-1", "--follow", *FAST)
    assert code == 1
    assert "job a-1 FAILED: learner 1 exited with 3" in out


def test_list(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a"))
    fake.add(view("b-1", "team-b"))
    code, out = run(url, tenants.a, "list")
    assert code == 0, out
    assert "a-1" in out
    assert "b-1" not in out
    code, out = run(url, tenants.b, "list", "-o", "json")
    assert [job["job_id"] for job in json.loads(out)] == ["b-1"]


def test_status_shows_reason_and_each_learner(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    learners = (
        LearnerView(learner_id=1, status="QUEUED", message="waiting for data", metrics={"loss": 0.25}),
        LearnerView(learner_id=2, status="QUEUED", exit_code=None),
    )
    fake.add(view("a-1", "team-a", status="QUEUED", reason=WAIT_REASON, learners=learners))
    code, out = run(url, tenants.a, "status", "a-1")
    assert code == 0, out
    for text in ("QUEUED", WAIT_REASON, "waiting for data", "loss=0.25"):
        assert text in out
    code, out = run(url, tenants.a, "status", "a-1", "-o", "json")
    job = json.loads(out)
    assert job["reason"] == WAIT_REASON
    metrics = [(learner["learner_id"], learner["metrics"]) for learner in job["learners"]]
    assert metrics == [(1, {"loss": 0.25}), (2, {})]


def test_another_tenants_job_is_not_found(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a"))
    for verb in ("status", "halt", "resume", "cancel", "delete", "logs", "metrics", "download"):
        code, out = run(url, tenants.b, verb, "a-1", "-o", "json")
        assert code == 1
        assert json.loads(out) == {"error": "JobNotFoundError", "message": "no job 'a-1'"}


def test_logs_follow_until_finished(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a"), log=LOG)
    code, out = run(url, tenants.a, "logs", "a-1", "-f", *FAST)
    assert code == 0, out
    assert out.encode() == LOG
    fake.add(view("a-2", "team-a"), log=LOG)
    code, out = run(url, tenants.a, "logs", "a-2", "-f", "--learner", "1", "-o", "json", *FAST)
    assert code == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    assert "".join(line["data"] for line in lines).encode() == LOG
    assert lines[-1]["finished"] is True
    assert [line["offset"] for line in lines[1:]] == [line["next_offset"] for line in lines[:-1]]


def test_logs_without_follow_print_what_is_there(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"), log=LOG)
    code, out = run(url, tenants.a, "logs", "a-1", "-o", "json")
    assert code == 0, out
    assert json.loads(out) == {
        "job_id": "a-1",
        "learner": 1,
        "data": LOG.decode(),
        "next_offset": len(LOG),
        "finished": True,
    }


def test_halt_resume_cancel(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a"))
    code, out = run(url, tenants.a, "halt", "a-1")
    assert (code, out.strip()) == (0, "job a-1: HALTED")
    code, out = run(url, tenants.a, "resume", "a-1", "-o", "json")
    assert (code, json.loads(out)["status"]) == (0, "QUEUED")
    code, out = run(url, tenants.a, "cancel", "a-1", "-o", "json")
    assert (code, json.loads(out)["status"]) == (0, "CANCELLED")
    code, out = run(url, tenants.a, "resume", "a-1", "-o", "json")
    assert code == 1
    assert json.loads(out) == {"error": "JobStateError", "message": "job a-1 is CANCELLED: cannot make it QUEUED"}
    code, out = run(url, tenants.a, "delete", "a-1")
    assert (code, out.strip()) == (0, "job a-1: CANCELLED")
    code, out = run(url, tenants.a, "status", "a-1", "-o", "json")
    assert (code, json.loads(out)["error"]) == (1, "JobNotFoundError")


def test_a_bad_token_says_how_to_set_one(url: str) -> None:
    code, out = run(url, "lkt_0123456789ab_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "list")
    assert code == 1
    assert "unknown or revoked token" in out
    assert "LEARNERKIT_TOKEN" in out


def test_client_errors_are_learnerkit_errors(url: str, tenants: Tenants) -> None:
    with pytest.raises(JobNotFoundError, match="no job 'zz 9'"):
        SchedulerClient(url, tenants.a).get("zz 9")
    with pytest.raises(AuthError):
        SchedulerClient(url, None).list_jobs()


def test_an_unreachable_scheduler_is_named() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(SchedulerUnreachableError, match=f"127.0.0.1:{port}"):
        SchedulerClient(f"http://127.0.0.1:{port}", "t", timeout_s=2).list_jobs()


def test_revoking_a_token_locks_out_a_running_server(url: str, tenants: Tenants, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["scheduler", "token", "add", "team-c", "--tokens", str(tenants.path), "-o", "json"])
    assert result.exit_code == 0, result.output
    token = json.loads(result.output)["token"]
    assert run(url, token, "list")[0] == 0
    listed = runner.invoke(cli, ["scheduler", "token", "list", "--tokens", str(tenants.path), "-o", "json"])
    assert token not in listed.output
    assert "team-c" in {row["tenant"] for row in json.loads(listed.output)}
    revoked = runner.invoke(cli, ["scheduler", "token", "revoke", "team-c", "--tokens", str(tenants.path)])
    assert revoked.exit_code == 0, revoked.output
    assert run(url, token, "list")[0] == 1
    assert "team-c" not in {e.tenant for e in read_tokens(tenants.path).values()}


def test_token_add_prints_the_token_alone_on_stdout(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    result = CliRunner().invoke(cli, ["scheduler", "token", "add", "team-a", "--tokens", str(path)])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert token.startswith("lkt_")
    assert "shown once" in result.stderr
    gone = CliRunner().invoke(cli, ["scheduler", "token", "revoke", "nobody", "--tokens", str(path)])
    assert gone.exit_code == 1
    assert "no token of tenant 'nobody'" in gone.output


def test_token_add_makes_an_operators_token_and_list_shows_each_role(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    runner = CliRunner()
    added = runner.invoke(
        cli, ["scheduler", "token", "add", "ops", "--role", "operator", "--tokens", str(path), "-o", "json"]
    )
    assert added.exit_code == 0, added.output
    assert json.loads(added.output)["role"] == "operator"
    assert runner.invoke(cli, ["scheduler", "token", "add", "team-a", "--tokens", str(path)]).exit_code == 0
    listed = runner.invoke(cli, ["scheduler", "token", "list", "--tokens", str(path), "-o", "json"])
    assert {(row["tenant"], row["role"]) for row in json.loads(listed.output)} == {
        ("ops", "operator"),
        ("team-a", "tenant"),
    }
    wrong = runner.invoke(cli, ["scheduler", "token", "add", "x", "--role", "admin", "--tokens", str(path)])
    assert wrong.exit_code == 2 and "'admin' is not one of 'tenant', 'operator'" in wrong.output


def test_follow_shows_changing_metrics(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    start = view("a-1", "team-a")
    later = replace(start, status="COMPLETED", learners=(replace(start.learners[0], metrics={"loss": 0.125}),))
    fake.add(start, script=[start, later])
    code, out = run(url, tenants.a, "status", "a-1", "-f", "-o", "json", *FAST)
    assert code == 0, out
    assert [json.loads(line)["learners"][0]["metrics"]["loss"] for line in out.splitlines()] == [0.25, 0.125]


def test_logs_tail_prints_the_last_lines_then_follows_on(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"), log=LOG)
    code, out = run(url, tenants.a, "logs", "a-1", "--tail", "1")
    assert code == 0, out
    assert out.encode() == LOG.splitlines(keepends=True)[-1]
    fake.add(view("a-2", "team-a"), log=LOG)
    code, out = run(url, tenants.a, "logs", "a-2", "--tail", "2", "-f", *FAST)
    assert code == 0, out
    assert out.encode() == b"".join(LOG.splitlines(keepends=True)[-2:])


def test_logs_from_an_offset(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"), log=LOG)
    code, out = run(url, tenants.a, "logs", "a-1", "--offset", "9")
    assert code == 0, out
    assert out.encode() == LOG[9:]


HISTORY = (
    b'{"step": 0, "time": 1795000000.0, "values": {"loss": 1.0}}\n'
    b"not json\n"
    b'{"step": 1, "time": 1795000001.0, "values": {"train/loss": 0.5, "train/lr": 0.25}, "source": "tensorboard"}\n'
)


def test_metrics_show_the_whole_history(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"), metrics=HISTORY)
    code, out = run(url, tenants.a, "metrics", "a-1")
    assert code == 0, out
    assert "train/lr" in out
    assert "2026-11-18 11:06:41" in out, "the time of step 1, in UTC"
    assert all(len(line) <= 80 for line in out.splitlines())
    code, out = run(url, tenants.a, "metrics", "a-1", "-o", "json")
    body = json.loads(out)
    assert [(r["step"], r["values"]) for r in body["records"]] == [
        (0, {"loss": 1.0}),
        (1, {"train/loss": 0.5, "train/lr": 0.25}),
    ]
    assert body["latest"] == {"loss": 0.25, "step": 100.0}


def test_a_deeply_nested_metrics_line_is_left_out_of_the_history(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    """Issue 27 D8: one such line made `job metrics` print a RecursionError traceback."""
    deep = b'{"step": 5, "values": {"loss": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}\n"
    fake.add(view("a-1", "team-a", status="COMPLETED"), metrics=HISTORY + deep + HISTORY.splitlines()[0] + b"\n")
    code, out = run(url, tenants.a, "metrics", "a-1", "-o", "json")
    assert code == 0, out[-2000:]
    assert [r["step"] for r in json.loads(out)["records"]] == [0, 1, 0]
    request = urllib.request.Request(f"{url}/v1/jobs/a-1/metrics", headers={"Authorization": f"Bearer {tenants.a}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        served = answer.read()
    assert b"[[[" not in served and b"not json" not in served


def test_metrics_before_the_history_is_stored_show_the_latest(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a"))
    code, out = run(url, tenants.a, "metrics", "a-1")
    assert code == 0, out
    assert "no metric history stored yet" in out
    assert "loss=0.25" in out


def test_download_writes_each_file_whole_under_its_path(
    url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path
) -> None:
    files = {
        "attempt-1/learner-1/results/out.txt": b"result bytes" * 1000,
        "attempt-1/learner-1/logs/learner.log.part-000001": b"log",
    }
    fake.add(view("a-1", "team-a", status="COMPLETED"), files=files)
    code, out = run(url, tenants.a, "download", "a-1", "--to", str(tmp_path / "out"), "-o", "json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["bytes"] == 12000
    assert summary["skipped"] == []
    assert (tmp_path / "out/attempt-1/learner-1/results/out.txt").read_bytes() == files[
        "attempt-1/learner-1/results/out.txt"
    ]
    assert not (tmp_path / "out/attempt-1/learner-1/logs").exists(), "--what results by default"
    code, out = run(url, tenants.a, "download", "a-1", "--to", str(tmp_path / "all"), "--what", "all")
    assert code == 0, out
    assert "model: job a-1 stored no model" in out
    found = sorted(str(p.relative_to(tmp_path / "all")) for p in (tmp_path / "all").rglob("*") if p.is_file())
    assert found == sorted(files), "no temporary file is left"


def test_a_download_cut_short_leaves_no_file(url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"), files={"attempt-1/learner-1/results/out.txt": b"whole"})
    listed = fake.outputs

    async def lying(tenant: str, job_id: str, *, what: str = "all") -> list[StoredFile]:
        return [replace(item, size=item.size + 5) for item in await listed(tenant, job_id, what=what)]

    fake.outputs = lying  # type: ignore[method-assign]
    code, out = run(url, tenants.a, "download", "a-1", "--to", str(tmp_path / "out"))
    assert code == 1
    assert "received 5 of 10 bytes" in out
    assert [p for p in (tmp_path / "out").rglob("*") if p.is_file()] == []


def test_each_file_is_downloaded_or_reported_by_name_and_the_rest_still_downloads(
    url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path
) -> None:
    """Issue 27 D11: a stored name with a newline stopped the whole download at "error: Not Found"."""
    files = {
        "attempt-1/learner-1/results/a.txt": b"a",
        "attempt-1/learner-1/results/line\nbreak.txt": b"newline",
        "attempt-1/learner-1/results/old\\style.txt": b"a backslash key, stored before percent-encoding",
        "attempt-1/learner-1/results/z.txt": b"z",
    }
    fake.add(view("a-1", "team-a", status="COMPLETED"), files=files)
    code, out = run(url, tenants.a, "download", "a-1", "--to", str(tmp_path / "out"), "-o", "json")
    assert code == 1, out
    summary = json.loads(out)
    assert [failure["path"] for failure in summary["failed"]] == ["attempt-1/learner-1/results/old\\style.txt"]
    assert "backslash" in summary["failed"][0]["error"]
    assert summary["bytes"] == 9
    out_dir = tmp_path / "out" / "attempt-1" / "learner-1" / "results"
    assert sorted(p.name for p in out_dir.iterdir()) == ["a.txt", "line\nbreak.txt", "z.txt"]
    assert (out_dir / "line\nbreak.txt").read_bytes() == b"newline"
    code, out = run(url, tenants.a, "download", "a-1", "--to", str(tmp_path / "text"))
    assert code == 1
    assert "not downloaded: 'attempt-1/learner-1/results/old\\\\style.txt'" in out
    assert "3 file(s)" in out


@pytest.mark.parametrize("columns", [60, 80])
def test_every_job_table_keeps_ids_whole_at_the_terminals_width(
    url: str, tenants: Tenants, fake: FakeFacade, columns: int
) -> None:
    """In a real process: the console takes its width from COLUMNS when it is made."""
    job_id = "job-dfd2a7c1e9b0"
    fake.add(view(job_id, "team-a", status="COMPLETED", reason="every learner completed its training"), metrics=HISTORY)
    env = {**os.environ, "LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": tenants.a, "COLUMNS": str(columns)}
    for args in (("list",), ("status", job_id), ("metrics", job_id)):
        shown = subprocess.run(
            [sys.executable, "-m", "learnerkit", "job", *args], capture_output=True, text=True, env=env, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        assert job_id in shown.stdout, shown.stdout
        assert "…" not in shown.stdout
        assert max(len(line) for line in shown.stdout.splitlines()) <= columns, shown.stdout


EVALUATIONS_FILE = """\
evaluations:
  - name: digits-robustness
    kind: robustness
    data: {file: digits-eval.csv, label: label}
    attacks: [fgsm]
    epsilons: [0.1]
"""
MISSED = "missed: adversarial_accuracy = 0.3481 (attack pgd, epsilon 0.1), threshold >= 0.6"


def _evaluated(fake: FakeFacade, job_id: str) -> None:
    """A completed job whose latest round has a missed threshold and a crash."""
    failed = EvaluationView("digits-robustness-with-a-long-name", "robustness", "failed", MISSED, "s3://r/k.json")
    crashed = EvaluationView("credit-fairness", "fairness", "crashed", "the evaluator ended FAILED (exit 2): no csv")
    fake.add(replace(view(job_id, "team-a", status="COMPLETED"), evaluations=(failed, crashed)))
    report = {"name": failed.name, "verdict": "failed", "failures": [{"metric": "adversarial_accuracy"}]}
    summary = f"evaluation {failed.name} (robustness): FAILED\n  {MISSED}\n"
    fake.jobs[job_id].reports = EvaluationReports(
        job_id, 2, (EvaluationReport(failed, summary, report), EvaluationReport(crashed))
    )


@pytest.mark.parametrize("columns", [60, 80])
def test_evaluations_show_each_outcome_whole_at_the_terminals_width(
    url: str, tenants: Tenants, fake: FakeFacade, columns: int
) -> None:
    job_id = "job-dfd2a7c1e9b0"
    _evaluated(fake, job_id)
    env = {**os.environ, "LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": tenants.a, "COLUMNS": str(columns)}
    for args in (("status", job_id), ("evaluations", job_id)):
        shown = subprocess.run(
            [sys.executable, "-m", "learnerkit", "job", *args], capture_output=True, text=True, env=env, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        assert "digits-robustness-with-a-long-name" in shown.stdout and "crashed" in shown.stdout, shown.stdout
        assert "…" not in shown.stdout
        assert max(len(line) for line in shown.stdout.splitlines()) <= columns, shown.stdout
        flat = "".join(shown.stdout.split())
        assert "".join(MISSED.split()) in flat, shown.stdout


def test_evaluations_as_json(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    _evaluated(fake, "job-9")
    code, out = run(url, tenants.a, "evaluations", "job-9", "-o", "json")
    assert code == 0, out
    reports = json.loads(out)
    assert reports["round"] == 2
    [failed, crashed] = reports["evaluations"]
    assert failed["evaluation"]["outcome"] == "failed" and failed["report"]["verdict"] == "failed"
    assert crashed["evaluation"]["outcome"] == "crashed" and crashed["report"] is None
    code, out = run(url, tenants.a, "status", "job-9", "-o", "json")
    assert [e["outcome"] for e in json.loads(out)["evaluations"]] == ["failed", "crashed"]


def test_evaluate_starts_a_round_and_refuses_a_bad_file_naming_its_line(
    url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path
) -> None:
    fake.add(view("job-7", "team-a", status="COMPLETED"))
    good = tmp_path / "evaluations.yml"
    good.write_text(EVALUATIONS_FILE)
    code, out = run(url, tenants.a, "evaluate", "job-7", str(good), "-o", "json")
    assert code == 0, out
    assert [(e["name"], e["outcome"]) for e in json.loads(out)["evaluations"]] == [("digits-robustness", "running")]
    bad = tmp_path / "bad.yml"
    bad.write_text(EVALUATIONS_FILE.replace("epsilons: [0.1]", "epsilons: [-1]"))
    code, out = run(url, tenants.a, "evaluate", "job-7", str(bad))
    assert code == 1
    assert "bad.yml:6: evaluations[0].epsilons" in out, out
    fake.add(view("job-8", "team-a", status="RUNNING"))
    code, out = run(url, tenants.a, "evaluate", "job-8", str(good))
    assert code == 1 and "only a COMPLETED job" in out, out


def test_status_shows_each_attempt_through_the_api_and_as_json(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    attempts = (
        AttemptView(
            1,
            ("local",),
            "2026-11-24T20:00:00Z",
            "2026-11-24T20:05:00Z",
            "PREEMPTED",
            "preempted by job job-0123456789ab",
            None,
            None,
            0.0,
            None,
        ),
        AttemptView(2, ("local",), "2026-11-24T20:06:00Z", resumed_from=1),
    )
    fake.add(view("a-2", "team-a", status="PROCESSING", attempts=attempts))
    code, out = run(url, tenants.a, "status", "a-2")
    assert code == 0, out
    for text in ("attempts", "PREEMPTED", "preempted by job", "attempt 1", "running", "0s"):
        assert text in out
    code, out = run(url, tenants.a, "status", "a-2", "-o", "json")
    shown = json.loads(out)["attempts"]
    assert [(a["number"], a["ended_by"], a["resumed_from"], a["work_lost_s"]) for a in shown] == [
        (1, "PREEMPTED", None, 0.0),
        (2, None, 1, None),
    ]
    assert shown[0]["reason"] == "preempted by job job-0123456789ab"


def test_verify_hashes_evaluation_data_as_the_scheduler_streams_it(
    url: str, tenants: Tenants, fake: FakeFacade
) -> None:
    fake.add(view("a-1", "team-a", status="COMPLETED"))
    fake.jobs["a-1"].evaluation_data["s3://data/eval/digits.csv"] = b"x,y\n1,0\n"
    lookup = evaluation_data_hasher(SchedulerClient(url, tenants.a), "a-1")
    assert lookup("s3://data/eval/digits.csv") == DataAnswer(hashlib.sha256(b"x,y\n1,0\n").hexdigest())
    refused = lookup("s3://data/other.csv")
    assert (refused.sha256, refused.problem) == (
        "",
        "job a-1: no evaluation round statement of it lists 's3://data/other.csv'",
    )


def test_list_pages_with_limit_and_next_printing_the_token_aside(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    for n in range(5):
        fake.add(view(f"a-{n}", "team-a", status="FAILED" if n % 2 else "COMPLETED"))
    env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": tenants.a}
    first = CliRunner().invoke(cli, ["job", "list", "--limit", "2", "-o", "json"], env=env)
    assert first.exit_code == 0, first.output
    assert [job["job_id"] for job in json.loads(first.stdout)] == ["a-0", "a-1"]
    hint = first.stderr.strip()
    assert hint.startswith("2 of 5 jobs; next page: --next ")
    token = hint.rsplit(" ", 1)[1]
    rest = CliRunner().invoke(cli, ["job", "list", "--limit", "5", "--next", token, "-o", "json"], env=env)
    assert [job["job_id"] for job in json.loads(rest.stdout)] == ["a-2", "a-3", "a-4"]
    assert rest.stderr == "", "the last page has no next token"
    failed = CliRunner().invoke(
        cli, ["job", "list", "--status", "failed", "--sort", "-submitted", "-o", "json"], env=env
    )
    assert [job["job_id"] for job in json.loads(failed.stdout)] == ["a-3", "a-1"]
    other = CliRunner().invoke(cli, ["job", "list", "--status", "failed", "--next", token], env=env)
    assert other.exit_code == 1
    assert "next: the token belongs to a query with other filters" in other.stderr
    bad = CliRunner().invoke(cli, ["job", "list", "--since", "yesterday"], env=env)
    assert bad.exit_code == 1 and "--since: expected an ISO-8601 time" in bad.stderr


def test_the_client_lists_every_job_page_after_page(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    for n in range(MAX_PAGE_JOBS + 3):
        fake.add(view(f"a-{n:04d}", "team-a"))
    listed = SchedulerClient(url, tenants.a).list_jobs()
    assert [job.job_id for job in listed] == [f"a-{n:04d}" for n in range(MAX_PAGE_JOBS + 3)]


def test_sweep_list_follows_every_page(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    """`GET /v1/sweeps` is paged (at most `MAX_PAGE_JOBS` a page): `sweep list` still lists every sweep, its JSON
    the one array it always was."""
    base = sweep()
    ids = [f"sweep-{n:08x}" for n in range(MAX_PAGE_JOBS + 3)]
    for n, sweep_id in enumerate(ids):
        fake.sweeps[sweep_id] = replace(
            base, sweep_id=sweep_id, submitted_at=f"2026-11-{1 + n // 60:02d}T04:{n % 60:02d}:00+00:00"
        )
    env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": tenants.a}
    listed = CliRunner().invoke(cli, ["sweep", "list", "-o", "json"], env=env)
    assert listed.exit_code == 0, listed.output
    assert [s["sweep_id"] for s in json.loads(listed.stdout)] == ids
    assert [s.sweep_id for s in SchedulerClient(url, tenants.a).page_sweeps(2).sweeps] == ids[:2]


@pytest.mark.parametrize("reason", ["", "waiting for 2 GPU(s) of type nvidia-a100: 1 free"])
def test_the_demos_list_at_80_columns_in_a_pipe_keeps_names_whole(
    url: str, tenants: Tenants, fake: FakeFacade, reason: str
) -> None:
    """`make demo`'s job at 80 columns: `pytorch-smoke` was folded mid-word beside an empty reason column."""
    fake.add(view("job-3f2a9c1d7e40", "team-a", status="COMPLETED", name="pytorch-smoke"))
    fake.add(view("job-3f2a9c1d7e41", "team-a", status="QUEUED", name="pytorch-smoke", reason=reason))
    env = {**os.environ, "LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": tenants.a, "COLUMNS": "80"}
    shown = subprocess.run(
        [sys.executable, "-m", "learnerkit", "job", "list"], capture_output=True, text=True, env=env, timeout=180
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, shown.stdout
    assert sum("pytorch-smoke" in line for line in lines) == 2, shown.stdout
    assert ("reason" in lines[1]) == bool(reason), "a column no job fills is left out"
    if reason:
        assert "".join(reason.split()) in "".join("".join(line[66:].split()) for line in lines[3:]), shown.stdout


def test_logs_of_an_earlier_attempt(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", status="PROCESSING"), log=b"resumed at step 40\n")
    fake.jobs["a-1"].past_logs = [b"step 10\nhalted: preempted\n"]
    code, out = run(url, tenants.a, "logs", "a-1", "--attempt", "1", "-f", *FAST)
    assert (code, out) == (0, "step 10\nhalted: preempted\n"), "an earlier attempt's log is finished: -f ends"
    code, out = run(url, tenants.a, "logs", "a-1", "--attempt", "1", "--tail", "1", "-o", "json")
    assert json.loads(out) == {
        "job_id": "a-1",
        "learner": 1,
        "attempt": 1,
        "data": "halted: preempted\n",
        "next_offset": 26,
        "finished": True,
    }
    code, out = run(url, tenants.a, "logs", "a-1", "--attempt", "3", "-o", "json")
    assert code == 1 and "400 attempt: job a-1 has attempts 1..2; got 3" in json.loads(out)["message"]


def test_follow_takes_the_jobs_events_and_snapshots_not_a_sweeps() -> None:
    class Streaming:
        def events(self) -> Iterator[dict[str, object] | None]:
            yield {"id": "5.0", "event": "sweep", "sweep_id": "sweep-0a1b2c3d", "status": "halted"}
            yield {"id": "6.0", "event": "job", "job_id": "other", "status": "QUEUED"}
            yield None
            yield {"id": "7.0", "event": "snapshot"}
            yield {"id": "8.0", "event": "job", "job_id": "a-1", "status": "PROCESSING"}

    got = list(_events_of(cast(SchedulerClient, Streaming()), "a-1", 0.1))
    assert got == [
        None,
        {"id": "7.0", "event": "snapshot"},
        {"id": "8.0", "event": "job", "job_id": "a-1", "status": "PROCESSING"},
    ]
