"""`model` commands check a model name where they read it, before contacting a scheduler or a registry."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli


@pytest.mark.parametrize(
    "arguments",
    [
        ["model", "register", "some-job", "--name", "Bad_Name"],
        ["model", "register-folder", ".", "--name", "Bad_Name"],
        ["model", "import", "--hf", ".", "--name", "Bad_Name"],
    ],
)
def test_a_bad_model_name_is_refused_before_anything_is_contacted(
    arguments: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on port 9 of loopback: were it contacted, the error would be a connection's, not the name's.
    monkeypatch.setenv("LEARNERKIT_SCHEDULER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LEARNERKIT_CATALOG_REGISTRY", "127.0.0.1:9")
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--name': 'Bad_Name': lower-case letters and digits" in result.output
