"""The S3 clients of the jobs' results stores, kept for log reads and model uploads."""

from __future__ import annotations

import threading

from controller_sidecar.endpoints import Endpoints
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Settings

STORES_KEPT = 16
"""S3 clients kept, one per endpoint and account (making one costs tens of milliseconds)."""


class S3Clients:
    """One client per store account, the oldest dropped past :data:`STORES_KEPT`; safe across worker threads."""

    def __init__(self) -> None:
        self._stores: dict[tuple[str | None, str | None, str | None], S3Store] = {}
        self._lock = threading.Lock()

    def of(self, endpoints: Endpoints) -> S3Store:
        """A kept client of the job's store account (log reads and model uploads run in worker threads)."""
        account = (endpoints.s3_endpoint_url, endpoints.s3_access_key, endpoints.s3_secret_key)
        with self._lock:
            store = self._stores.get(account)
            if store is None:
                store = S3Store(S3Settings(endpoint_url=account[0], access_key=account[1], secret_key=account[2]))
                if len(self._stores) >= STORES_KEPT:
                    self._stores.pop(next(iter(self._stores)))
                self._stores[account] = store
        return store
