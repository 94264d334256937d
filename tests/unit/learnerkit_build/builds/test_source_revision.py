"""The revision label an image gets: the checkout's commit, or the one a git-less source copy is told it is."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from learnerkit_build.builds.images import SOURCE_REVISION_ENV, source_revision


def committed(root: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    (root / "a.txt").write_text("a\n")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one")
    return git("rev-parse", "HEAD").strip()


def test_a_copy_without_git_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SOURCE_REVISION_ENV, raising=False)
    assert source_revision(tmp_path) == "unknown"


def test_a_copy_without_git_takes_the_revision_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SOURCE_REVISION_ENV, " 0123abcd \n")
    assert source_revision(tmp_path) == "0123abcd"


def test_a_checkout_is_its_commit_and_dirty_with_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SOURCE_REVISION_ENV, raising=False)
    commit = committed(tmp_path)
    assert source_revision(tmp_path) == commit
    (tmp_path / "a.txt").write_text("changed\n")
    assert source_revision(tmp_path) == f"{commit}-dirty"
