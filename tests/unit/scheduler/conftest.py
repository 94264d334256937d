"""Fixtures for the API, auth and CLI tests: a tokens file with two tenants and a fake facade."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from learnerkit.scheduler.api.auth import add_token
from tests.unit.scheduler.fakefacade import FakeFacade


@dataclass(frozen=True)
class Tenants:
    path: Path
    a: str
    """team-a's token."""
    b: str
    """team-b's token."""


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Tenants:
    """Module-scoped: each token costs one scrypt to make."""
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    return Tenants(path, add_token(path, "team-a"), add_token(path, "team-b"))


@pytest.fixture
def fake() -> FakeFacade:
    return FakeFacade()
