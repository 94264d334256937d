"""The sweep trial a version's job ran, signed: the scheduler's statement that the job was trial T of sweep S and
last finished rung R (the job's provenance signs only the trial's parameters: the sweep's record, not the job,
knows the trial and its rung). Stored as a document of the version (``provenance/catalog-trial.json``, a DSSE
envelope of an in-toto Statement v1 whose subjects are the job's results, as the provenance's are); the lineage
gate reads the trial from it alone, so a trial edited in the version's config, or a statement of another job,
is named. A registration without the platform's key names no trial."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key, Signer

from learnerkit.common.signing import STATEMENT_TYPE, EnvelopeError, open_signed, sign_statement

TRIAL_FILE = "provenance/catalog-trial.json"
PREDICATE_TYPE = "https://learnerkit.dev/catalog/sweep-trial/v1"
FIELDS = ("sweep", "trial", "job", "rung")


def sign_trial(trial: Mapping[str, Any], provenance: Mapping[str, Any], signer: Signer) -> bytes:
    """The signed statement of ``trial`` (``sweep``, ``trial``, ``job``, ``rung``) about the job whose provenance
    statement is ``provenance``."""
    definition = provenance["predicate"]["buildDefinition"]
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": s["name"], "digest": s["digest"]} for s in provenance["subject"]],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "tenant": definition["externalParameters"].get("tenant"),
            **{field: trial.get(field) for field in FIELDS},
        },
    }
    return json.dumps(sign_statement(statement, signer), sort_keys=True).encode()


class TrialStatementError(Exception):
    """The trial statement does not verify, or is not of this job."""


def signed_trial(folder: Path, provenance: Mapping[str, Any], keys: Sequence[Key]) -> dict[str, Any] | None:
    """The trial the folder's signed statement names (None without one); TrialStatementError naming what is wrong
    when it does not verify with ``keys`` or names another job, tenant or results than the provenance."""
    path = folder / TRIAL_FILE
    if not path.is_file():
        return None
    try:
        statement, _ = open_signed(path.read_bytes(), keys, TRIAL_FILE)
    except EnvelopeError as e:
        raise TrialStatementError(str(e)) from e
    predicate = statement.get("predicate") or {}
    definition = provenance["predicate"]["buildDefinition"]
    job = definition["internalParameters"].get("jobId")
    tenant = definition["externalParameters"].get("tenant")
    results = sorted((s["name"], s["digest"].get("sha256")) for s in provenance["subject"])
    named = sorted((s.get("name"), (s.get("digest") or {}).get("sha256")) for s in statement.get("subject", []))
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise TrialStatementError(f"{TRIAL_FILE}: not a sweep trial statement")
    if (predicate.get("job"), predicate.get("tenant")) != (job, tenant) or named != results:
        raise TrialStatementError(
            f"{TRIAL_FILE}: a statement of job {predicate.get('job')} of tenant {predicate.get('tenant')}, "
            f"not of this version's job {job} of tenant {tenant} and its results"
        )
    return {field: predicate.get(field) for field in FIELDS}
