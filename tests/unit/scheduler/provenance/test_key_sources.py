"""Every error about a signing or public key names the option or variable that supplied the key, and its path:
a user with several keys (a `--key`, the environment's, the default) sees which one to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.errors import ConfigError
from learnerkit.scheduler.config.settings import SchedulerSettings
from learnerkit.scheduler.factory import create_scheduler


def message(args: list[str], env: dict[str, str] | None = None) -> str:
    answer = CliRunner().invoke(cli, [*args, "-o", "json"], env=env)
    assert answer.exit_code == 1, answer.output
    return str(json.loads(answer.output)["message"])


def test_key_rotate_names_the_option_or_the_variable_that_gave_the_key(tmp_path: Path) -> None:
    missing, broken = tmp_path / "absent.pem", tmp_path / "broken.pem"
    broken.write_text("not a key")
    assert message(["scheduler", "key", "rotate", "--key", str(missing)]).startswith(f"--key={missing}: no signing key")
    env = {"LEARNERKIT_SIGNING_KEY": str(broken)}
    assert message(["scheduler", "key", "rotate"], env).startswith(f"LEARNERKIT_SIGNING_KEY={broken}: not a readable")


def test_the_scheduler_names_serve_s_option_when_it_gave_the_key(tmp_path: Path) -> None:
    key = tmp_path / "absent.pem"
    settings = SchedulerSettings.from_env({}).with_overrides(signing={"key": key, "source": "--signing-key"})
    with pytest.raises(ConfigError, match=rf"^--signing-key={key}: no signing key there"):
        create_scheduler(settings)


def test_model_and_job_commands_name_the_public_key_option(tmp_path: Path) -> None:
    missing = tmp_path / "absent.pub"
    listed = message(["model", "list", "--tenant", "t", "--registry", "127.0.0.1:1", "--public-key", str(missing)])
    assert listed.startswith(f"--public-key={missing}: not a readable PEM public key"), listed
    env = {"LEARNERKIT_SIGNING_KEY": str(tmp_path / "platform.pem")}
    beside = message(["model", "list", "--tenant", "t", "--registry", "127.0.0.1:1"], env)
    assert beside.startswith(f"the .pub beside LEARNERKIT_SIGNING_KEY={tmp_path / 'platform.pub'}: "), beside


def test_image_verify_names_its_public_key_option(tmp_path: Path) -> None:
    broken = tmp_path / "broken.pub"
    broken.write_text("not a key")
    verified = message(["image", "verify", "127.0.0.1:1/learnerkit/x:1", "--public-key", str(broken)])
    assert verified.startswith(f"--public-key={broken}: not a PEM public key"), verified
