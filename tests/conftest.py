"""Plugins shared by every test tier: the real servers the service tests run against."""

from __future__ import annotations

import os

from hypothesis import settings

# Property tests draw the same examples on every run: a run that fails only under some random draw is a flaky
# test. Set LEARNERKIT_HYPOTHESIS_EXPLORE=1 to search with fresh random draws (and keep what it finds as an
# @example).
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("explore" if os.environ.get("LEARNERKIT_HYPOTHESIS_EXPLORE") == "1" else "repeatable")

pytest_plugins = ["tests.servers.etcd", "tests.servers.s3", "tests.engine_leftovers"]
