"""Plugins shared by every test tier: the real servers the service tests run against."""

from __future__ import annotations

pytest_plugins = ["tests.servers.etcd", "tests.servers.s3"]
