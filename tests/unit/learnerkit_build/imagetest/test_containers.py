"""A learner container that the engine creates but cannot start is removed all the same (issue 27: a make test
left a *created* smoke container of pytorch:2.13-cuda behind, on an engine without GPUs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker.errors
import pytest

from learnerkit.common.engine import EngineError
from learnerkit_build.imagetest import containers
from learnerkit_build.imagetest.containers import GpusRefused, LearnerRun, running

NO_GPUS = 'could not select device driver "" with capabilities: [[gpu]]'


class FakeContainer:
    def __init__(self, engine: FakeEngine, start_error: str | None) -> None:
        self.engine = engine
        self.start_error = start_error

    def start(self) -> None:
        if self.start_error is not None:
            raise docker.errors.APIError("500 Server Error", explanation=self.start_error)

    def remove(self, force: bool = False) -> None:
        assert force
        self.engine.existing.remove(self)


class FakeEngine:
    """docker-py's collection as far as it matters: ``run`` is create + start, and keeps what it created when
    the start fails."""

    def __init__(self, start_error: str | None) -> None:
        self.start_error = start_error
        self.existing: list[FakeContainer] = []
        self.containers = self

    def create(self, **options: Any) -> FakeContainer:
        assert "detach" not in options
        container = FakeContainer(self, self.start_error)
        self.existing.append(container)
        return container

    def run(self, **options: Any) -> FakeContainer:
        options.pop("detach", None)
        container = self.create(**options)
        container.start()
        return container


@pytest.mark.parametrize(
    ("gpus", "start_error", "raised"),
    [(True, NO_GPUS, GpusRefused), (False, "no space left on device", EngineError), (False, None, None)],
)
def test_the_container_is_removed_whether_or_not_it_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpus: bool, start_error: str | None, raised: type | None
) -> None:
    fake = FakeEngine(start_error)
    monkeypatch.setattr(containers, "engine", lambda: fake)
    run = LearnerRun("learnerkit/pytorch:2.13-cuda-py3.11", tmp_path, ["true"], gpus=gpus)
    if raised is None:
        with running(run) as container:
            assert fake.existing == [container]
    else:
        with pytest.raises(raised), running(run):
            pytest.fail("the body must not run")
    assert fake.existing == [], "a container was left behind"
