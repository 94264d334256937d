"""The order the test files start in: the slowest tiers first, so the last files a worker picks up are quick ones.

pytest-xdist's `--dist loadfile` hands whole files to workers; by default it starts the files with the most tests
first, which puts the real-cluster files (one to nine tests of minutes each, a cluster to start per file) last,
where a worker ran them alone while the others had finished: the end of the parallel run waited on them. `make
test` passes `--no-loadscope-reorder`, so the workers take the files in the order collected, and this plugin
orders the collection: the real-cluster tiers first, then the tests against real servers, then the unit tests,
each tier in its own collection order.
"""

from __future__ import annotations

import pytest

SLOWEST_FIRST = ("tests/k8s/", "tests/e2e/", "tests/integration/")
"""Folders by how long their files take, slowest first; a file under none of them starts after them all."""


def start_rank(nodeid: str) -> int:
    """Where a test's file starts: its tier's place in `SLOWEST_FIRST`, else after all of them."""
    return next((rank for rank, folder in enumerate(SLOWEST_FIRST) if nodeid.startswith(folder)), len(SLOWEST_FIRST))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: start_rank(item.nodeid))
