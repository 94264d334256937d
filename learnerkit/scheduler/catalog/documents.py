"""Which files of a job folder (as `job download --what all` writes it) go into a version, by document."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from learnerkit.scheduler.catalog.card import CARD_FILE
from learnerkit.scheduler.provenance.evaluation import round_file
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON, FACTSHEET_MD
from learnerkit.scheduler.provenance.modelsig import SIGNATURE_FILE
from learnerkit.scheduler.provenance.statement import MANIFEST_FILE
from learnerkit.scheduler.provenance.verify import PROVENANCE_FILE


def weights(statement: Mapping[str, Any]) -> list[str]:
    """The model's files: the statement's result subjects (the files the model signature lists)."""
    return sorted(s["name"] for s in statement["subject"] if s.get("annotations", {}).get("kind") != "manifest")


def documents(
    folder: Path, statement: Mapping[str, Any], rounds: Mapping[int, Mapping[str, Any]]
) -> dict[str, list[str]]:
    """Each document kind and its files, as they lie in the folder (and in a version's folder)."""
    histories = [
        str(b["name"])
        for b in statement["predicate"]["runDetails"].get("byproducts", [])
        if str(b["name"]).endswith(".jsonl") and (folder / str(b["name"])).is_file()
    ]
    found = {
        "signature": [SIGNATURE_FILE],
        "provenance": [PROVENANCE_FILE, MANIFEST_FILE, *histories],
    }
    for number, round_statement in sorted(rounds.items()):
        reports = [r["name"] for e in round_statement["predicate"]["evaluations"] for r in e["reports"]]
        found[f"evaluation-round-{number}"] = [round_file(number), *sorted(reports)]
    found["factsheet"] = [FACTSHEET_JSON, FACTSHEET_MD]
    found["card"] = [CARD_FILE]
    return found
