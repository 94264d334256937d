"""The alias log: per model, an append-only chain of signed entries, one per alias move.

Each entry is a DSSE envelope (the platform's key) of an in-toto Statement v1 whose subject is the version the alias
moves to, predicate ``https://learnerkit.dev/catalog/alias-move/v1``: the model, alias, from and to digests, who,
when, the checks passed, its sequence number and the SHA-256 of the previous entry's envelope. The log is one
manifest (tag ``aliases``) whose layers are the entries in order; an append writes a new manifest with one more
layer, then the alias's tag. An entry edited breaks its signature, one removed breaks the chain (or, the last,
leaves the alias's tag on a version no entry moved it to): `model verify` names either.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from securesystemslib.signer import Key, Signer

from learnerkit.common.signing import STATEMENT_TYPE, EnvelopeError, canonical, open_signed, sign_statement
from learnerkit.scheduler.catalog import layout, oci
from learnerkit.scheduler.catalog.errors import ConflictError
from learnerkit.scheduler.catalog.versions import Store
from learnerkit.scheduler.provenance.report import Check, State

PREDICATE_TYPE = "https://learnerkit.dev/catalog/alias-move/v1"
LOG_TAG = "aliases"
LOG_TYPE = "application/vnd.learnerkit.alias-log.v1"


@dataclass(frozen=True)
class Entry:
    envelope: bytes
    move: dict[str, Any]
    """The predicate; empty where the envelope does not verify."""


def read_log(store: Store, name: str) -> list[bytes]:
    return [oci.get_blob(store.host, store.repo(name), digest) for digest in _log_layers(store, name)]


def _log_layers(store: Store, name: str) -> list[str]:
    """The digests of the stored log's entries, oldest first (none without a log)."""
    found = oci.get_manifest(store.host, store.repo(name), LOG_TAG)
    if found is None:
        return []
    return [str(layer["digest"]) for layer in layout.parse_json(found[0], f"{name} alias log").get("layers", [])]


def check_chain(envelopes: Sequence[bytes], keys: Sequence[Key], name: str) -> tuple[list[Entry], list[Check]]:
    entries, checks, previous = [], [], ""
    for number, raw in enumerate(envelopes, start=1):
        item = f"alias log entry {number}"
        try:
            statement, key = open_signed(raw, keys, item)
        except EnvelopeError as e:
            checks.append(Check(item, State.CHANGED, str(e)))
            entries.append(Entry(raw, {}))
            previous = hashlib.sha256(raw).hexdigest()
            continue
        move = statement.get("predicate", {})
        problems = []
        if statement.get("predicateType") != PREDICATE_TYPE or move.get("model") != name:
            problems.append(f"not an alias move of {name}")
        if move.get("sequence") != number:
            problems.append(f"sequence {move.get('sequence')}, its place is {number} (an entry removed or added)")
        if move.get("previous") != previous:
            problems.append("the previous entry's digest is not the one before it (an entry removed or edited)")
        checks.append(
            Check(item, State.CHANGED if problems else State.OK, "; ".join(problems) or f"signed by {key.keyid}")
        )
        entries.append(Entry(raw, move))
        previous = hashlib.sha256(raw).hexdigest()
    return entries, checks


def current(entries: Sequence[Entry], alias: str) -> str | None:
    target = None
    for entry in entries:
        if entry.move.get("alias") == alias:
            target = entry.move.get("to")
    return target


def append(
    store: Store,
    name: str,
    envelopes: Sequence[bytes],
    alias: str,
    source: str | None,
    target: str,
    by: str,
    at: str,
    passed: Sequence[str],
    signer: Signer,
) -> dict[str, Any]:
    """Sign the move, write the log with it last, then move the alias's tag; the move as signed. ConflictError,
    nothing written, when the stored log is no longer ``envelopes`` (another move appended meanwhile: the
    registry has no compare-and-swap, so this narrows the race; the scheduler's lock closes it)."""
    move = {
        "model": name,
        "alias": alias,
        "from": source,
        "to": target,
        "by": by,
        "at": at,
        "checksPassed": list(passed),
        "sequence": len(envelopes) + 1,
        "previous": hashlib.sha256(envelopes[-1]).hexdigest() if envelopes else "",
    }
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f"{store.tenant}/{name}", "digest": {"sha256": target.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": move,
    }
    envelope = json.dumps(sign_statement(statement, signer), sort_keys=True).encode()
    repo = store.repo(name)
    layers = []
    for raw in [*envelopes, envelope]:
        layers.append(layout.descriptor(layout.DSSE_TYPE, oci.put_blob(store.host, repo, raw), len(raw)))
    empty = oci.put_blob(store.host, repo, layout.EMPTY)
    manifest = canonical(
        {
            "schemaVersion": 2,
            "mediaType": layout.OCI_MANIFEST,
            "artifactType": LOG_TYPE,
            "config": layout.descriptor(layout.OCI_EMPTY, empty, len(layout.EMPTY)),
            "layers": layers,
        }
    )
    if _log_layers(store, name) != [oci.sha256_digest(raw) for raw in envelopes]:
        raise ConflictError(
            f"{name}: the alias log changed while this move of {alias} was checked (another move ran at once); "
            "nothing appended: run it again"
        )
    oci.put_manifest(store.host, repo, LOG_TAG, manifest, layout.OCI_MANIFEST)
    found = oci.get_manifest(store.host, repo, target)
    assert found is not None
    oci.put_manifest(store.host, repo, alias, found[0], layout.OCI_MANIFEST)
    return move
