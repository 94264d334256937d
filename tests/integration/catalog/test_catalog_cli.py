"""`learnerkit model` against Debian's docker-registry: register's JSON names the version, an alias moves, verify
and history answer in JSON, and a pulled version passes the stock `model_signing verify key`."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.signing import public_key_path
from tests.integration.catalog.modeljob import job_folder
from tests.unit.scheduler.provenance.test_interop import model_signing_verify

pytestmark = [pytest.mark.integration]


def model(*args: str, env: dict[str, str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["model", *args, "--output", "json"], env=env)
    return result.exit_code, result.output


def test_register_alias_verify_history_and_a_pull_the_stock_verifier_accepts(registry: str, tmp_path: Path) -> None:
    folder, key = job_folder(tmp_path / "job")
    env = {
        "LEARNERKIT_CATALOG_REGISTRY": registry,
        "LEARNERKIT_TENANT": f"team-{uuid.uuid4().hex[:8]}",
        "LEARNERKIT_SIGNING_KEY": str(key),
    }
    code, out = model("register-folder", str(folder), "--name", "digits", env=env)
    assert code == 0, out
    registered = json.loads(out)
    assert registered["name"] == "digits" and registered["version"].startswith("sha256:")
    version = registered["version"]
    code, out = model("alias", "digits", "production", version, env=env)
    assert code == 0 and json.loads(out)["to"] == version, out
    code, out = model("verify", "digits@production", env=env)
    assert code == 0 and json.loads(out)["verified"] is True, out
    code, out = model("history", "digits", env=env)
    assert code == 0 and [m["alias"] for m in json.loads(out)] == ["production"], out
    code, out = model("list", env=env)
    assert json.loads(out) == [{"name": "digits", "versions": [version]}]
    people = CliRunner().invoke(cli, ["model", "list"], env={**env, "COLUMNS": "80"})
    assert f"digits@{version}" in people.output.splitlines(), people.output  # whole on one line at 80 columns
    pulled = tmp_path / "pulled"
    code, out = model("pull", "digits@production", str(pulled), env=env)
    assert code == 0, out
    done = model_signing_verify(pulled, public_key_path(key))
    assert done.returncode == 0, done.stdout + done.stderr
    code, out = model("verify", "digits@staging", env=env)
    assert code == 1 and "no alias 'staging'" in json.loads(out)["message"], out
