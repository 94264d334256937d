"""Integration tests run against the real Docker engine that `make setup` starts, and real builds."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from learnerkit_build import engine
from learnerkit_build.render import BuildInputs

REPO = Path(__file__).resolve().parents[2]
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """The engine; integration tests fail (never skip) without one: `make test` starts it."""
    return engine.engine()


@pytest.fixture(scope="session")
def build_inputs() -> BuildInputs:
    # The same defaults as the Makefile, so a bare `pytest` finds the images `make images` built.
    wheelhouse = os.environ.get("LEARNERKIT_WHEELHOUSE") or ("/opt/wheels" if Path("/opt/wheels").is_dir() else None)
    ca = os.environ.get("LEARNERKIT_CA_BUNDLE") or (str(CA_BUNDLE) if CA_BUNDLE.is_file() else None)
    return BuildInputs(wheelhouse=Path(wheelhouse) if wheelhouse else None, ca_bundle=Path(ca) if ca else None)


@pytest.fixture
def scratch_project(tmp_path: Path) -> Path:
    """A project root with the real learner_base and no frameworks yet."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "learner_base", root / "learner_base", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "frameworks").mkdir()
    return root


@pytest.fixture
def image_cleanup(docker_client: Any) -> Iterator[list[str]]:
    """Repositories to delete after the test (every tag of each)."""
    repositories: list[str] = []
    yield repositories
    for repository in repositories:
        for image in docker_client.images.list(name=repository):
            docker_client.images.remove(image.id, force=True)
