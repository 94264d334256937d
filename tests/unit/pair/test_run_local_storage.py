"""`sidecar run-local --storage MiB` bounds the pair's /job as a manifest's `storage` does on the Docker backend."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.pair import cli_sidecar
from learnerkit.pair.runlocal import LocalRun, pair_spec


def pair_of(monkeypatch: pytest.MonkeyPatch, *options: str) -> Any:
    """The pair `run-local` would start with ``options`` (nothing is started)."""
    seen: list[LocalRun] = []

    def run_local(run: LocalRun, **_: object) -> None:
        seen.append(run)
        raise SystemExit(0)

    monkeypatch.setattr(cli_sidecar, "run_local", run_local)
    argv = [
        "sidecar",
        "run-local",
        "img",
        "--etcd",
        "127.0.0.1:2379",
        "--results",
        "s3://results/runs/",
        "--sidecar-image",
        "s",
    ]
    result = CliRunner().invoke(cli, [*argv, *options, "--", "true"])
    assert result.exit_code == 0, result.output
    return pair_spec(seen[0])


def test_storage_bounds_the_job_folder_in_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pair_of(monkeypatch, "--storage", "64").storage_bytes == 64 << 20


def test_without_storage_the_job_folder_is_unbounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pair_of(monkeypatch).storage_bytes is None


def test_a_storage_of_nothing_is_refused_naming_the_option() -> None:
    argv = [
        "sidecar",
        "run-local",
        "img",
        "--etcd",
        "e:1",
        "--results",
        "s3://results/runs/",
        "--storage",
        "0",
        "--",
        "true",
    ]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2 and "--storage" in result.output, result.output
