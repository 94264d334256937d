"""`job verify`'s check of the factsheet: it is not signed itself, so it is rendered again from what is (the job's
statement, the metric history it names by digest, each round statement) and must be the one in the folder."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller_sidecar.metricrecords import parse_record
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON, FACTSHEET_MD, factsheet, factsheet_markdown
from learnerkit.scheduler.provenance.report import Check, State


def signed_metrics(folder: Path, statement: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The records of the last metric history the statement names, where the folder holds it as signed; None
    where it does not hold it as signed (its own check names a change); [] where the job has none."""
    histories = [
        b for b in statement["predicate"]["runDetails"].get("byproducts", []) if str(b["name"]).endswith(".jsonl")
    ]
    if not histories:
        return []
    path = folder / histories[-1]["name"]
    if not path.is_file():
        return None
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != histories[-1]["digest"]["sha256"]:
        return None
    return [parsed for line in data.splitlines() if (parsed := parse_record(line)) is not None]


def factsheet_checks(folder: Path, statement: Mapping[str, Any], rounds: Sequence[Mapping[str, Any]]) -> list[Check]:
    if not (folder / FACTSHEET_JSON).is_file():
        return [Check(f"factsheet {FACTSHEET_JSON}", State.NOT_CHECKED, "not in the folder")]
    metrics = signed_metrics(folder, statement)
    expected = factsheet(statement, metrics or [], rounds)
    try:
        stored = json.loads((folder / FACTSHEET_JSON).read_bytes())
    except ValueError as e:
        return [Check(f"factsheet {FACTSHEET_JSON}", State.CHANGED, f"not JSON: {e}")]
    detail = ""
    if metrics is None and isinstance(stored, dict):  # the history is not here: its figures cannot be rendered
        expected["metrics"] = stored.get("metrics")
        detail = "its metrics not checked (the metric history is not in the folder as signed)"
    checks = []
    if stored != expected:
        differing = sorted(k for k in expected.keys() | stored.keys() if expected.get(k) != stored.get(k))
        checks.append(
            Check(f"factsheet {FACTSHEET_JSON}", State.CHANGED, f"not what the signed statements say: {differing}")
        )
    else:
        checks.append(Check(f"factsheet {FACTSHEET_JSON}", State.OK, detail))
    markdown = folder / FACTSHEET_MD
    if markdown.is_file():
        same = markdown.read_text(errors="replace") == factsheet_markdown(expected)
        checks.append(
            Check(f"factsheet {FACTSHEET_MD}", State.OK if same else State.CHANGED, "" if same else "not as rendered")
        )
    return checks
