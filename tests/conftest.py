"""Plugins shared by every test tier: the real servers the service tests run against."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from xdist.remote import Producer

from tests.scheduling import LongestFirstFileScheduling

# Property tests draw the same examples on every run: a run that fails only under some random draw is a flaky
# test. Set LEARNERKIT_HYPOTHESIS_EXPLORE=1 to search with fresh random draws (and keep what it finds as an
# @example).
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("explore" if os.environ.get("LEARNERKIT_HYPOTHESIS_EXPLORE") == "1" else "repeatable")

# pytest-xdist's workers start with COLUMNS=80 in their environment, and the CLI's consoles
# (learnerkit.common.output) keep a width COLUMNS gives when they are made, for good: every table a worker's tests
# draw would be 80 wide whatever COLUMNS a test gives its command. A command run by a user reads COLUMNS once, at
# its start; here, where one process runs many commands, none is set until a test sets it for its own command.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

pytest_plugins = ["tests.servers.etcd", "tests.servers.s3", "tests.engine_leftovers"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LongestFirstFileScheduling | None:
    """`--dist loadfile` (`make test`) with the real-cluster tier's files first (tests/scheduling.py)."""
    return LongestFirstFileScheduling(config, log) if config.getoption("dist") == "loadfile" else None
