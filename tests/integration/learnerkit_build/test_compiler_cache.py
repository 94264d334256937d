"""A compiler cache outlives the build tool's prune: what one build writes into a BuildKit cache mount (as Caffe's
compile writes ccache's objects) is there for the next build, after the prune every build runs
(`learnerkit_build.builds.buildkit.prune_cache`), on the real engine with a tiny image of the local base.

The engine is shared with the suite's other builds, so the caps are the configured ones: a cap lowered until it
binds would evict every other build's layers. What the prune's filters rest on is checked here instead: the engine
types the mount `exec.cachemount` (the layer cap names `regular` only), it accepts the filters (a refused prune
would be a note in the log), and the mount's content reaches the next build; without the mount, it does not."""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.builds.buildkit import (
    CACHE_MOUNT_RECORD,
    BuildRequest,
    cache_caps,
    find_buildkit_cli,
    prune_argvs,
    run_build,
)


class CacheMountBuilds:
    """Builds of one tiny image whose one step appends a word to a cache mount of its own and prints the mount's
    words; removes its images and its mount afterwards."""

    def __init__(self, docker_client: Any, root: Path) -> None:
        self.client = docker_client
        self.root = root
        self.token = uuid.uuid4().hex
        self.target = f"/learnerkit-test-cache-{self.token}"
        self.images: list[str] = []
        ensure_base(recipe_for("debian-bookworm"), lambda line: None)
        self.base = base_reference(recipe_for("debian-bookworm"))

    def build(self, word: str) -> tuple[list[str], list[str]]:
        """Build with `word` appended; return the words the step saw in the mount and the build's log."""
        context = self.root / f"context-{word}"
        context.mkdir()
        # The words are printed by the step (`seen-42`), not found in its command line, which BuildKit echoes.
        (context / "Dockerfile").write_text(
            f"FROM {self.base}\n"
            f"RUN --mount=type=cache,id=learnerkit-test-{self.token},target={self.target} "
            f'echo {word} >> {self.target}/words && echo "seen-$((6 * 7)): $(paste -sd, {self.target}/words)"\n',
            encoding="utf-8",
        )
        lines: list[str] = []
        request = BuildRequest(context=context, image_name="compiler-cache-test", labels={}, secrets={})
        self.images.append(run_build(request, lines.append))
        [seen] = [m.group(1) for line in lines if (m := re.search(r"seen-42: (\S*)", line))]
        return seen.split(","), lines

    def mount_records(self) -> list[dict[str, Any]]:
        """This test's cache mount records in the engine's build cache (their description names the target)."""
        records: list[dict[str, Any]] = self.client.df().get("BuildCache") or []
        return [r for r in records if f"cached mount {self.target} " in (r.get("Description") or "")]

    def remove_mounts(self) -> None:
        """Remove this test's mount records only (a prune filtered by their IDs)."""
        cli = find_buildkit_cli()
        prune = prune_argvs(cli, cache_caps())[0][:-2]  # the CLI's prune command and --force
        for record in self.mount_records():
            subprocess.run([*prune, "--filter", f"id={record['ID']}"], check=True, capture_output=True, timeout=120)

    def close(self) -> None:
        self.remove_mounts()
        for image in self.images:
            self.client.images.remove(image, force=True)


@pytest.fixture
def cache_builds(docker_client: Any, tmp_path: Path) -> Iterator[CacheMountBuilds]:
    builds = CacheMountBuilds(docker_client, tmp_path)
    try:
        yield builds
    finally:
        builds.close()


@pytest.mark.timeout(900)
def test_a_cache_mount_outlives_the_prune_after_each_build(cache_builds: CacheMountBuilds) -> None:
    seen, log = cache_builds.build("one")
    assert seen == ["one"]
    assert not [line for line in log if "not pruned" in line], log[-5:]  # the engine took every filter
    [record] = cache_builds.mount_records()
    assert record["Type"] == CACHE_MOUNT_RECORD  # what the layer cap's filter (type=regular) leaves alone

    seen, log = cache_builds.build("two")
    assert seen == ["one", "two"]  # written before the first build's prune, read after it
    assert not [line for line in log if "not pruned" in line], log[-5:]

    cache_builds.remove_mounts()
    assert cache_builds.mount_records() == []
    seen, _ = cache_builds.build("three")
    assert seen == ["three"]  # the words came from the mount, not from anything else the builds keep
