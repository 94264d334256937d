"""The base's recipe: its tag follows the bytes of the committed base lock, not the checkout's folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from learnerkit_build.builds.baseimage import base_reference, recipe_for

REPO = Path(__file__).resolve().parents[4]
LOCK = Path("learner_base/lock/debian-bookworm.json")


def project(dest: Path) -> Path:
    (dest / "frameworks").mkdir(parents=True)
    (dest / LOCK).parent.mkdir(parents=True)
    shutil.copyfile(REPO / "learner_base/Dockerfile.j2", dest / "learner_base/Dockerfile.j2")
    shutil.copyfile(REPO / LOCK, dest / LOCK)
    return dest


def test_two_checkouts_of_one_lock_name_one_base_and_another_lock_another(tmp_path: Path) -> None:
    one, two = project(tmp_path / "one"), project(tmp_path / "else" / "two")
    assert recipe_for("debian-bookworm", one).lock_file == one / LOCK
    assert base_reference(recipe_for("debian-bookworm", one)) == base_reference(recipe_for("debian-bookworm", two))
    (two / LOCK).write_text((two / LOCK).read_text(encoding="utf-8").replace("bookworm", "trixie"), encoding="utf-8")
    assert base_reference(recipe_for("debian-bookworm", one)) != base_reference(recipe_for("debian-bookworm", two))


def test_without_a_committed_lock_the_base_is_made_from_the_mirrors(tmp_path: Path) -> None:
    root = project(tmp_path / "one")
    (root / LOCK).unlink()
    assert recipe_for("debian-bookworm", root).lock_file is None
