"""A manifest's text with its stores' credentials replaced: what the scheduler keeps of a job that can never run
again (docs/security.md). The job's view and its results' location still follow from it after a restart."""

from __future__ import annotations

from typing import Any

import yaml

from learnerkit.scheduler.manifest.model import CREDENTIAL_KEYS

REDACTED = "(deleted)"
"""What a credential reads once deleted: a value the parser accepts, so the redacted manifest still parses."""


def redact_credentials(text: str) -> str:
    """``text`` (a manifest the parser accepted) with every data store's ``user_name`` and ``password`` replaced
    by :data:`REDACTED`; comments and layout are not kept."""
    doc: Any = yaml.safe_load(text)
    stores = doc.get("data_stores") if isinstance(doc, dict) else None
    for store in stores if isinstance(stores, list) else ():
        connection = store.get("connection") if isinstance(store, dict) else None
        if isinstance(connection, dict):
            for key in CREDENTIAL_KEYS:
                if key in connection:
                    connection[key] = REDACTED
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
