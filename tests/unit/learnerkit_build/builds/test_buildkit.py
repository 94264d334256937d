"""After each build, BuildKit's copies of build contexts are pruned and its cache capped, with the CLI that built;
a prune that fails is a note in the build's log, never a failed build."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit.common.errors import ConfigError
from learnerkit_build.builds.buildkit import BuildkitCli, cache_keep_mb, prune_argvs, prune_cache

LEGACY = BuildkitCli(argv=("/usr/bin/docker", "build"), env=(("DOCKER_BUILDKIT", "1"),))
BUILDX = BuildkitCli(argv=("/usr/local/bin/docker", "buildx", "build", "--load"), env=())


def test_the_prunes_name_the_contexts_then_the_cap_with_the_cli_that_builds() -> None:
    contexts, cap = ["--force", "--filter", "type=source.local"], ["--force", "--keep-storage", "512mb"]
    assert prune_argvs(LEGACY, 512) == [
        ["/usr/bin/docker", "builder", "prune", *contexts],
        ["/usr/bin/docker", "builder", "prune", *cap],
    ]
    assert prune_argvs(BUILDX, 512) == [
        ["/usr/local/bin/docker", "buildx", "prune", *contexts],
        ["/usr/local/bin/docker", "buildx", "prune", *cap],
    ]


def test_the_cap_is_8_gib_unless_set_and_a_bad_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEARNERKIT_BUILD_CACHE_MB", raising=False)
    assert cache_keep_mb() == 8192
    monkeypatch.setenv("LEARNERKIT_BUILD_CACHE_MB", "0")
    assert cache_keep_mb() == 0
    for bad in ("8GB", "-1", ""):
        monkeypatch.setenv("LEARNERKIT_BUILD_CACHE_MB", bad)
        with pytest.raises(ConfigError, match="LEARNERKIT_BUILD_CACHE_MB"):
            cache_keep_mb()


def fake_cli(tmp_path: Path, script: str) -> BuildkitCli:
    exe = tmp_path / "docker"
    exe.write_text(f"#!/bin/sh\n{script}\n", encoding="utf-8")
    exe.chmod(0o755)
    return BuildkitCli(argv=(str(exe), "build"), env=(("DOCKER_BUILDKIT", "1"),))


def test_the_prunes_run_with_the_clis_environment_and_say_nothing_when_they_work(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    cli = fake_cli(tmp_path, f'echo "$DOCKER_BUILDKIT $*" >> {seen}')
    lines: list[str] = []
    prune_cache(cli, 100, lines.append)
    assert seen.read_text(encoding="utf-8").splitlines() == [
        "1 builder prune --force --filter type=source.local",
        "1 builder prune --force --keep-storage 100mb",
    ]
    assert lines == []


@pytest.mark.parametrize(
    ("script", "said"),
    [("echo 'Error response from daemon: no space left' >&2; exit 1", "no space left"), ("exit 3", "exit 3")],
)
def test_a_prune_that_fails_is_one_note_in_the_log(tmp_path: Path, script: str, said: str) -> None:
    lines: list[str] = []
    prune_cache(fake_cli(tmp_path, script), 100, lines.append)
    assert len(lines) == 1 and lines[0].startswith("note: BuildKit's cache was not pruned"), lines
    assert said in lines[0]


def test_a_cli_that_is_gone_is_a_note_too(tmp_path: Path) -> None:
    lines: list[str] = []
    prune_cache(BuildkitCli(argv=(str(tmp_path / "missing"), "build"), env=()), 100, lines.append)
    assert len(lines) == 1 and "not pruned" in lines[0]
