"""After each build, BuildKit's copies of build contexts are pruned with the CLI that built, and a prune that fails
is a note in the build's log, never a failed build."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit_build.buildkit import BuildkitCli, prune_argv, prune_contexts

LEGACY = BuildkitCli(argv=("/usr/bin/docker", "build"), env=(("DOCKER_BUILDKIT", "1"),))
BUILDX = BuildkitCli(argv=("/usr/local/bin/docker", "buildx", "build", "--load"), env=())


def test_the_prune_names_only_context_records_with_the_cli_that_builds() -> None:
    filters = ["--force", "--filter", "type=source.local"]
    assert prune_argv(LEGACY) == ["/usr/bin/docker", "builder", "prune", *filters]
    assert prune_argv(BUILDX) == ["/usr/local/bin/docker", "buildx", "prune", *filters]


def fake_cli(tmp_path: Path, script: str) -> BuildkitCli:
    exe = tmp_path / "docker"
    exe.write_text(f"#!/bin/sh\n{script}\n", encoding="utf-8")
    exe.chmod(0o755)
    return BuildkitCli(argv=(str(exe), "build"), env=(("DOCKER_BUILDKIT", "1"),))


def test_a_prune_runs_with_the_clis_environment_and_says_nothing_when_it_works(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    cli = fake_cli(tmp_path, f'echo "$DOCKER_BUILDKIT $*" > {seen}')
    lines: list[str] = []
    prune_contexts(cli, lines.append)
    assert seen.read_text(encoding="utf-8").split() == [
        "1",
        "builder",
        "prune",
        "--force",
        "--filter",
        "type=source.local",
    ]
    assert lines == []


@pytest.mark.parametrize(
    ("script", "said"),
    [("echo 'Error response from daemon: no space left' >&2; exit 1", "no space left"), ("exit 3", "exit 3")],
)
def test_a_prune_that_fails_is_a_note_in_the_log(tmp_path: Path, script: str, said: str) -> None:
    lines: list[str] = []
    prune_contexts(fake_cli(tmp_path, script), lines.append)
    assert len(lines) == 1 and lines[0].startswith("note: the copies of build contexts were not pruned"), lines
    assert said in lines[0]


def test_a_cli_that_is_gone_is_a_note_too(tmp_path: Path) -> None:
    lines: list[str] = []
    prune_contexts(BuildkitCli(argv=(str(tmp_path / "missing"), "build"), env=()), lines.append)
    assert len(lines) == 1 and "not pruned" in lines[0]
