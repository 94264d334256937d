"""A job's statement checked against in-toto attestation's definitions: the Statement and ResourceDescriptor
protobufs and the SLSA provenance v1 predicate's (unknown fields refused: ``ParseDict`` is strict), then the rules
the specification states in prose and the protobufs cannot hold: a non-empty ``subject``, each subject with a
``digest``, and every ResourceDescriptor (subjects, resolved dependencies, byproducts) with a ``uri``, a ``digest``
or a ``content``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"


def spec_violations(statement: Mapping[str, Any]) -> list[str]:
    """Every rule the statement breaks, named by where; empty when it is valid."""
    found: list[str] = []
    try:
        parsed = json_format.ParseDict(dict(statement), statement_pb2.Statement())
        Statement.copy_from_pb(parsed).validate()
    except (json_format.ParseError, ValueError) as e:
        found.append(f"statement: {e}")
    if statement.get("_type") != STATEMENT_TYPE:
        found.append(f"_type is {statement.get('_type')!r}")
    subjects = statement.get("subject") or []
    if not subjects:
        found.append("subject: empty (a Statement must have at least one)")
    for index, subject in enumerate(subjects):
        if not subject.get("digest"):
            found.append(f"subject[{index}]: no digest")
        found += _descriptor(f"subject[{index}]", subject)
    predicate = statement.get("predicate", {})
    if statement.get("predicateType") == "https://slsa.dev/provenance/v1":
        try:
            json_format.ParseDict(dict(predicate), provenance_pb2.Provenance())
        except json_format.ParseError as e:
            found.append(f"predicate: {e}")
        definition, run = predicate.get("buildDefinition", {}), predicate.get("runDetails", {})
        for key in ("buildType", "externalParameters"):
            if key not in definition:
                found.append(f"buildDefinition.{key}: missing")
        if not run.get("builder", {}).get("id"):
            found.append("runDetails.builder.id: missing")
        for index, item in enumerate(definition.get("resolvedDependencies", [])):
            found += _descriptor(f"resolvedDependencies[{index}]", item)
        for index, item in enumerate(run.get("byproducts", [])):
            found += _descriptor(f"byproducts[{index}] {item.get('name')}", item)
    return found


def _descriptor(where: str, item: Mapping[str, Any]) -> list[str]:
    found = []
    if not (item.get("uri") or item.get("digest") or item.get("content")):
        found.append(f"{where}: a ResourceDescriptor needs a uri, a digest or a content")
    try:
        ResourceDescriptor.copy_from_pb(json_format.ParseDict(dict(item), ResourceDescriptor().pb)).validate()
    except (json_format.ParseError, ValueError) as e:
        found.append(f"{where}: {e}")
    return found
