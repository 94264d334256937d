"""`learnerkit sweep ...` end to end: the CLI, the real REST API (uvicorn on 127.0.0.1) over the real
Scheduler, etcd, SeaweedFS and learner pairs on Docker. A sweep is submitted with its model folder, halted
and resumed, followed to its end, and its best trial read back; bad input is refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from tests.integration.scheduler.conftest import manifest
from tests.integration.scheduler.test_model_code_api import Api, api, api_limits
from tests.integration.scheduler.test_sweeps import SEARCH, TRAIN, history_steps
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]
__all__ = ["api", "api_limits"]  # the API fixture and its limits, shared with the job CLI's tests


def sweep_cli(api: Api, *args: str, columns: int = 80) -> tuple[int, str]:
    env = {"LEARNERKIT_SCHEDULER_URL": api.url, "LEARNERKIT_TOKEN": api.token, "COLUMNS": str(columns)}
    result = CliRunner().invoke(cli, ["sweep", *args], env=env)
    return result.exit_code, result.output


def sweep_json(api: Api, *args: str) -> Any:
    code, out = sweep_cli(api, *args, "-o", "json")
    assert code == 0, out
    return json.loads(out)


def files(tmp_path: Path, s3_server: Any, command: str = "python3 train.py --lr ${lr}") -> tuple[Path, Path]:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text(TRAIN)
    (tmp_path / "manifest.yml").write_text(manifest(s3_server, command))
    (tmp_path / "search.yml").write_text(SEARCH)
    return tmp_path / "search.yml", tmp_path / "model"


def test_sweep_submit_halt_resume_status_and_best_through_the_api(
    api: Api, s3_server: Any, scheduler_buckets: Any, learner_image: str, tmp_path: Path
) -> None:
    search, model = files(tmp_path, s3_server)
    submitted = sweep_json(api, "submit", str(search), str(model), "--image", learner_image)
    sweep_id = submitted["sweep_id"]
    assert submitted["status"] == "running" and submitted["rungs"] == [2, 4, 8]
    assert sweep_json(api, "halt", sweep_id)["status"] == "halted"
    code, out = sweep_cli(api, "halt", sweep_id)
    assert code == 1 and f"sweep {sweep_id} is halted: only a running sweep halts" in out
    assert sweep_json(api, "resume", sweep_id)["status"] == "running"
    final = wait_until(
        lambda: (view := sweep_json(api, "status", sweep_id))["status"] == "done" and view,
        timeout=600,
        interval=0.5,
        message=lambda: f"{sweep_id} to end: {sweep_json(api, 'status', sweep_id)}",
    )
    for trial in final["trials"]:
        assert history_steps(scheduler_buckets, trial["job_id"]) == list(range(1, trial["budget"] + 1)), trial
    best = sweep_json(api, "best", sweep_id)
    assert best["trial"]["parameters"] == {"lr": "0.2"} and best["trial"]["state"] == "completed"
    assert best["trial"]["results_location"] == f"s3://sched-results/{best['trial']['job_id']}/"
    assert [s["sweep_id"] for s in sweep_json(api, "list")].count(sweep_id) == 1
    code, table = sweep_cli(api, "status", sweep_id)
    assert code == 0
    for trial in final["trials"]:  # ids whole at 80 columns
        assert trial["job_id"] in table
    assert "the top" in table or "promoted" in table or "no longer be promoted" in table
    code, out = sweep_cli(api, "cancel", sweep_id)
    assert code == 1 and f"sweep {sweep_id} is done already" in out


def test_bad_sweeps_are_refused_naming_the_field(api: Api, s3_server: Any, tmp_path: Path) -> None:
    search, model = files(tmp_path, s3_server, command="python3 train.py --lr ${lr} --wd ${weight_decay}")
    code, out = sweep_cli(api, "submit", str(search), str(model), "-o", "json")
    assert code == 1
    assert "framework.command: ${weight_decay} is not a parameter of the sweep search.yml" in out
    code, out = sweep_cli(api, "status", "sweep-nosuch0", "-o", "json")
    assert code == 1 and "no sweep 'sweep-nosuch0'" in out
