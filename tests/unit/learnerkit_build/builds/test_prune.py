"""`image prune`: only the selected images' old content tags, and those of the bases they are built on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from learnerkit.common import engine
from learnerkit_build.builds import prune as pruning
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.spec import ImageSpec
from tests.unit.conftest import REPO

IMAGE: ImageSpec = next(i for i in load_matrix(REPO).images if i.local_base == "debian-bookworm")
CURRENT = {"learnerkit/base": "debian-bookworm", IMAGE.repository(): IMAGE.tag}


@dataclass
class Found:
    id: str
    tags: list[str]


class Images:
    """Each repository's images: the current build (id `new`) and an older one (id `old`)."""

    def list(self, name: str) -> list[Found]:
        tag = CURRENT[name]
        return [Found("new", [f"{name}:{tag}"]), Found("old", [f"{name}:{tag}-0123456789ab"])]


class Engine:
    images = Images()


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "engine", lambda: Engine())
    monkeypatch.setattr(engine, "image_id", lambda reference: "new")


@pytest.mark.usefixtures("fake_engine")
def test_a_selected_image_prunes_its_own_old_tags_and_its_bases() -> None:
    assert pruning.stale_tags([IMAGE]) == [
        "learnerkit/base:debian-bookworm-0123456789ab",
        f"{IMAGE.repository()}:{IMAGE.tag}-0123456789ab",
    ]


@pytest.mark.usefixtures("fake_engine")
def test_nothing_selected_prunes_no_base() -> None:
    assert pruning.stale_tags([]) == []
