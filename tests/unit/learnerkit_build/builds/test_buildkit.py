"""After each build, BuildKit's copies of build contexts are pruned and its cache capped, with the CLI that built:
layers to `LEARNERKIT_BUILD_CACHE_MB`, the compiler caches (cache mounts) only beyond a further
`LEARNERKIT_COMPILER_CACHE_MB`; a prune that fails is a note in the build's log, never a failed build."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit.common.errors import ConfigError
from learnerkit_build.builds.buildkit import BuildkitCli, CacheCaps, cache_caps, prune_argvs, prune_cache

LEGACY = BuildkitCli(argv=("/usr/bin/docker", "build"), env=(("DOCKER_BUILDKIT", "1"),))
BUILDX = BuildkitCli(argv=("/usr/local/bin/docker", "buildx", "build", "--load"), env=())


CAPS = CacheCaps(layers_mb=512, compiler_mb=100)


def test_the_prunes_name_the_contexts_then_the_layers_then_the_compiler_caches_with_the_cli_that_builds() -> None:
    contexts = ["--force", "--filter", "type=source.local"]
    layers = ["--force", "--filter", "type=regular", "--keep-storage", "512mb"]
    compiler = ["--force", "--filter", "type=exec.cachemount", "--keep-storage", "612mb"]
    assert prune_argvs(LEGACY, CAPS) == [
        ["/usr/bin/docker", "builder", "prune", *contexts],
        ["/usr/bin/docker", "builder", "prune", *layers],
        ["/usr/bin/docker", "builder", "prune", *compiler],
    ]
    assert prune_argvs(BUILDX, CAPS) == [
        ["/usr/local/bin/docker", "buildx", "prune", *contexts],
        ["/usr/local/bin/docker", "buildx", "prune", *layers],
        ["/usr/local/bin/docker", "buildx", "prune", *compiler],
    ]


def test_no_cap_can_remove_a_compiler_cache_but_the_compiler_caches_own() -> None:
    """A prune with --keep-storage and no type filter removes any record, cache mounts too (measured: see
    docs/build-tool.md): only the last prune may name them, and every other prune names one type."""
    *others, compiler = prune_argvs(LEGACY, CAPS)
    for argv in others:
        assert argv.count("--filter") == 1 and "type=exec.cachemount" not in argv, argv
    assert compiler[compiler.index("--filter") + 1] == "type=exec.cachemount"


def test_the_caps_are_8_gib_and_2_gib_more_unless_set_and_a_bad_setting_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LEARNERKIT_BUILD_CACHE_MB", raising=False)
    monkeypatch.delenv("LEARNERKIT_COMPILER_CACHE_MB", raising=False)
    assert cache_caps() == CacheCaps(layers_mb=8192, compiler_mb=2048)
    monkeypatch.setenv("LEARNERKIT_BUILD_CACHE_MB", "0")
    monkeypatch.setenv("LEARNERKIT_COMPILER_CACHE_MB", "300")
    assert cache_caps() == CacheCaps(layers_mb=0, compiler_mb=300)
    for variable in ("LEARNERKIT_BUILD_CACHE_MB", "LEARNERKIT_COMPILER_CACHE_MB"):
        for bad in ("8GB", "-1", ""):
            monkeypatch.setenv(variable, bad)
            with pytest.raises(ConfigError, match=variable):
                cache_caps()
        monkeypatch.setenv(variable, "0")


def test_both_caps_at_zero_keep_nothing() -> None:
    *_, layers, compiler = prune_argvs(LEGACY, CacheCaps(layers_mb=0, compiler_mb=0))
    assert layers[-1] == compiler[-1] == "0mb"


def fake_cli(tmp_path: Path, script: str) -> BuildkitCli:
    exe = tmp_path / "docker"
    exe.write_text(f"#!/bin/sh\n{script}\n", encoding="utf-8")
    exe.chmod(0o755)
    return BuildkitCli(argv=(str(exe), "build"), env=(("DOCKER_BUILDKIT", "1"),))


def test_the_prunes_run_with_the_clis_environment_and_say_nothing_when_they_work(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    cli = fake_cli(tmp_path, f'echo "$DOCKER_BUILDKIT $*" >> {seen}')
    lines: list[str] = []
    prune_cache(cli, CacheCaps(layers_mb=100, compiler_mb=50), lines.append)
    assert seen.read_text(encoding="utf-8").splitlines() == [
        "1 builder prune --force --filter type=source.local",
        "1 builder prune --force --filter type=regular --keep-storage 100mb",
        "1 builder prune --force --filter type=exec.cachemount --keep-storage 150mb",
    ]
    assert lines == []


@pytest.mark.parametrize(
    ("script", "said"),
    [("echo 'Error response from daemon: no space left' >&2; exit 1", "no space left"), ("exit 3", "exit 3")],
)
def test_a_prune_that_fails_is_one_note_in_the_log(tmp_path: Path, script: str, said: str) -> None:
    lines: list[str] = []
    prune_cache(fake_cli(tmp_path, script), CAPS, lines.append)
    assert len(lines) == 1 and lines[0].startswith("note: BuildKit's cache was not pruned"), lines
    assert said in lines[0]


def test_a_cli_that_is_gone_is_a_note_too(tmp_path: Path) -> None:
    lines: list[str] = []
    prune_cache(BuildkitCli(argv=(str(tmp_path / "missing"), "build"), env=()), CAPS, lines.append)
    assert len(lines) == 1 and "not pruned" in lines[0]
