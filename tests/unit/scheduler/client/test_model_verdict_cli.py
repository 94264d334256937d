"""The model's verdict as a user meets it: `job status` and `job list` show it beside the training status, and
`job submit -f` / `job status --follow` wait for it after the job completes and exit 3 when the model was rejected
(1 stays a FAILED job)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.cli_job import REJECTED_EXIT
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import MANIFEST, FakeFacade, view
from tests.waiting import wait_until

FAST = ("--interval", "0.01")
REJECTED = "rejected (fairness: disparate_impact 0.31, wants >= 0.8)"


@pytest.fixture
def url(fake: FakeFacade, tenants: Tenants) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(fake, tenants.path), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def run(url: str, token: str, *args: str) -> tuple[int, str]:
    env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": token, "COLUMNS": "80"}
    result = CliRunner().invoke(cli, ["job", *args], env=env)
    return result.exit_code, result.output


def test_submit_follow_waits_for_the_verdict_and_exits_3_when_the_model_is_rejected(
    url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path
) -> None:
    manifest = tmp_path / "manifest.yml"
    manifest.write_text(MANIFEST.format(gpus=1))
    fake.after_submit = ["PROCESSING", ("COMPLETED", "pending"), ("COMPLETED", "pending"), ("COMPLETED", REJECTED)]
    code, out = run(url, tenants.a, "submit", str(manifest), "-f", "-o", "json", *FAST)
    assert code == REJECTED_EXIT == 3, out
    assert [json.loads(line)["model"] for line in out.splitlines()][-2:] == ["pending", REJECTED]


def test_status_follow_exits_0_for_an_accepted_model_and_3_for_a_rejected_one(
    url: str, tenants: Tenants, fake: FakeFacade
) -> None:
    done = view("a-1", "team-a", status="COMPLETED", model="pending")
    fake.add(view("a-1", "team-a"), script=[done, done, view("a-1", "team-a", "COMPLETED", model="accepted")])
    code, out = run(url, tenants.a, "status", "a-1", "--follow", *FAST)
    assert code == 0 and "accepted" in out, out
    done = view("a-2", "team-a", status="COMPLETED", model="pending")
    fake.add(view("a-2", "team-a"), script=[done, view("a-2", "team-a", "COMPLETED", model=REJECTED)])
    code, out = run(url, tenants.a, "status", "a-2", "--follow", *FAST)
    assert code == 3, out
    assert "job a-2's model rejected (fairness: disparate_impact 0.31, wants >= 0.8)" in " ".join(out.split())


def test_status_and_list_show_the_verdict_beside_the_status(url: str, tenants: Tenants, fake: FakeFacade) -> None:
    fake.add(view("a-1", "team-a", "COMPLETED", model=REJECTED))
    fake.add(view("a-2", "team-a", "COMPLETED", model="accepted"))
    code, out = run(url, tenants.a, "status", "a-1")
    assert code == 0 and "model" in out and REJECTED in " ".join(out.split()), out
    code, out = run(url, tenants.a, "status", "a-1", "-o", "json")
    assert json.loads(out)["model"] == REJECTED
    code, out = run(url, tenants.a, "list")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip().startswith("a-")}
    assert "rejected" in rows["a-1"] and "accepted" in rows["a-2"], out
    assert max(len(line) for line in out.splitlines()) <= 80, out
