"""File hashes remembered across runs by stat: given again for an unchanged file, taken afresh for a changed one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from learnerkit_build.recipes import filehashes
from learnerkit_build.recipes.filehashes import FileHashes


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file read whole, in order."""
    seen: list[Path] = []
    real = filehashes._hash_file

    def counting(path: Path) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(filehashes, "_hash_file", counting)
    return seen


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_unchanged_file_is_not_read_again_by_the_next_run(
    tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filehashes, "SETTLED_S", 0.0)
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"wheel one")
    memory = tmp_path / "memory.json"
    first = FileHashes()
    assert first.sha256(wheel) == sha(b"wheel one")
    first.save(memory)
    second = FileHashes()
    second.load(memory)
    assert second.sha256(wheel) == sha(b"wheel one")
    assert reads == [wheel.resolve()]


def test_a_file_rewritten_with_the_same_size_is_hashed_again(
    tmp_path: Path, reads: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filehashes, "SETTLED_S", 0.0)
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"wheel one")
    memory = tmp_path / "memory.json"
    first = FileHashes()
    first.sha256(wheel)
    first.save(memory)
    wheel.write_bytes(b"wheel two")
    second = FileHashes()
    second.load(memory)
    assert second.sha256(wheel) == sha(b"wheel two")
    assert len(reads) == 2


def test_a_file_changed_moments_ago_is_not_remembered(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.txt"
    fresh.write_bytes(b"just written")
    hashes = FileHashes()
    assert hashes.sha256(fresh) == sha(b"just written")
    memory = tmp_path / "memory.json"
    hashes.save(memory)
    assert not memory.exists()


@pytest.mark.parametrize("content", ["not json", '{"scheme": "other", "files": {}}', '{"scheme": 1}', "[]"])
def test_an_unreadable_memory_is_an_empty_one(tmp_path: Path, content: str, reads: list[Path]) -> None:
    memory = tmp_path / "memory.json"
    memory.write_text(content, encoding="utf-8")
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"wheel")
    hashes = FileHashes()
    hashes.load(memory)
    assert hashes.sha256(wheel) == sha(b"wheel")
    assert reads == [wheel.resolve()]


def test_remembering_saves_the_projects_memory_atomically_and_readable_only_by_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filehashes, "SETTLED_S", 0.0)
    monkeypatch.setattr(filehashes, "HASHES", FileHashes())
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"wheel")
    with filehashes.remembering(tmp_path):
        filehashes.file_sha256(wheel)
    memory = tmp_path / filehashes.MEMORY_FILE
    assert json.loads(memory.read_text(encoding="utf-8"))["files"][str(wheel.resolve())][4] == sha(b"wheel")
    assert memory.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in memory.parent.iterdir()] == [memory.name]
