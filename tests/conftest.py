"""Fixtures shared by every test tier: the real servers of :mod:`tests.servers`."""

pytest_plugins = ["tests.servers.s3"]
