"""`dev up --with-scheduler` passes the caller's LEARNERKIT_* settings to the scheduler (not the CLI's token, not
ETCD_* or AWS_*), leaves out its own defaults where the caller sets them, and `dev status` shows them."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.dev.cli_dev import dev_group
from learnerkit.dev.environment import DevServices
from learnerkit.dev.scheduler import SCHEDULER_SERVICE, scheduler_settings
from learnerkit.dev.service import Launch, Service

CALLER = {
    "PATH": "/usr/bin:/bin",
    "LEARNERKIT_PREEMPTION_MIN_RUN_S": "30",
    "LEARNERKIT_PREEMPTION_MAX_PER_JOB": "2",
    "LEARNERKIT_TOKEN": "lkt_secret",
    "LEARNERKIT_SCHEDULER_URL": "https://127.0.0.1:8080",
    "ETCD_ENDPOINTS": "elsewhere:2379",
    "AWS_SECRET_ACCESS_KEY": "theirs",
}
# A service that writes the environment it got, then waits to be stopped (what a server does).
WRITE_ENV = (
    "import json, os, signal; json.dump(dict(os.environ), open('env.json.tmp', 'w')); "
    "os.rename('env.json.tmp', 'env.json'); signal.pause()"
)


def env_writer() -> Service:
    return Service(
        name="scheduler",
        ports={"api": 18931},
        main_port="api",
        argv=lambda launch: [sys.executable, "-c", WRITE_ENV],
        probe=lambda launch: (launch.folder / "env.json").exists(),
        settings=scheduler_settings,
        optional=True,
    )


@pytest.fixture
def started(tmp_path: Path) -> Iterator[DevServices]:
    services = DevServices(tmp_path, (env_writer(),), caller=CALLER)
    services.up(with_optional=["scheduler"])
    try:
        yield services
    finally:
        services.down()


def test_the_process_gets_the_callers_settings_and_nothing_else_of_its_environment(
    started: DevServices, tmp_path: Path
) -> None:
    got = json.loads((tmp_path / "scheduler" / "env.json").read_text())
    assert got["LEARNERKIT_PREEMPTION_MIN_RUN_S"] == "30" and got["LEARNERKIT_PREEMPTION_MAX_PER_JOB"] == "2"
    assert not {"LEARNERKIT_TOKEN", "LEARNERKIT_SCHEDULER_URL", "ETCD_ENDPOINTS", "AWS_SECRET_ACCESS_KEY"} & set(got)


def test_status_shows_the_settings_and_up_again_says_when_they_differ(started: DevServices, tmp_path: Path) -> None:
    (row,) = started.status()
    assert row.settings == {"LEARNERKIT_PREEMPTION_MIN_RUN_S": "30", "LEARNERKIT_PREEMPTION_MAX_PER_JOB": "2"}
    again = DevServices(tmp_path, (env_writer(),), caller={**CALLER, "LEARNERKIT_PREEMPTION_MIN_RUN_S": "10"})
    (up,) = again.up()
    assert up.action is not None and "with other settings" in up.action


def test_dev_status_prints_them_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("learnerkit.dev.cli_dev.DevServices", lambda folder: DevServices(folder, (env_writer(),)))
    runner = CliRunner(env={"COLUMNS": "80", "LEARNERKIT_PREEMPTION_MIN_RUN_S": "30"})
    state = ["--state-dir", str(tmp_path)]
    try:
        assert runner.invoke(dev_group, [*state, "up", "--with-scheduler"]).exit_code == 0
        shown = runner.invoke(dev_group, [*state, "status"])
        as_json = json.loads(runner.invoke(dev_group, [*state, "status", "--output", "json"]).output)
    finally:
        runner.invoke(dev_group, [*state, "down"])
    assert "  LEARNERKIT_PREEMPTION_MIN_RUN_S=30" in shown.output.splitlines(), shown.output
    assert as_json[0]["settings"]["LEARNERKIT_PREEMPTION_MIN_RUN_S"] == "30"


def argv(settings: dict[str, str], tmp_path: Path) -> list[str]:
    env = {"ETCD_ENDPOINTS": "127.0.0.1:2379", "S3_ENDPOINT_URL": "http://127.0.0.1:8333"}
    return SCHEDULER_SERVICE.argv(Launch("scheduler", tmp_path, {"api": 8080}, env, (), settings))


def test_the_callers_settings_replace_the_dev_defaults_they_name(tmp_path: Path) -> None:
    plain = argv({}, tmp_path)
    assert {"--default-cpus", "--default-memory", "--results-bucket", "--tenants"} <= set(plain)
    mine = argv({"LEARNERKIT_DEFAULT_CPUS": "0.5", "LEARNERKIT_TENANTS": "/etc/mine.yaml"}, tmp_path)
    assert "--default-cpus" not in mine and "--tenants" not in mine
    assert {"--default-memory", "--results-bucket", "--tokens", "--tls-cert"} <= set(mine)
