"""The proof an alias move asks of a version, check by check, from its folder as the registry gave it back.

The job's own checks are `job verify`'s (`verify_folder`: every signature with the platform's keys, every file
hashed again); the catalog adds its own: the version's files are the signed results, the learner image passed the
scan gate, every evaluation round passed, the card is the one the signed statements render (its stated metrics
the attested ones), and the version's lineage is the one they give. Images are not asked of any engine or
registry (offline): those checks say `not checked` and do not fail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key

from learnerkit.common.signing import EnvelopeError, open_signed
from learnerkit.scheduler.catalog.card import CARD_FILE, read_front_matter, render_card, stated_metrics
from learnerkit.scheduler.catalog.documents import weights
from learnerkit.scheduler.catalog.errors import CatalogError
from learnerkit.scheduler.catalog.lineage import lineage
from learnerkit.scheduler.catalog.trialstatement import TrialStatementError, signed_trial
from learnerkit.scheduler.catalog.versions import Version, framework_of
from learnerkit.scheduler.provenance.evaluation import ROUND_PREFIX, ROUND_SUFFIX, round_of
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON
from learnerkit.scheduler.provenance.report import Check, State
from learnerkit.scheduler.provenance.statement import LEARNER_IMAGE
from learnerkit.scheduler.provenance.verify import PROVENANCE_FILE, NoProvenanceError, verify_folder

WEIGHTS = "weights signature"
PROVENANCE = "provenance"
SCAN = "scan gate"
EVALUATIONS = "evaluation thresholds"
CARD = "model card"
LINEAGE = "lineage"
GATES = (WEIGHTS, PROVENANCE, SCAN, EVALUATIONS, CARD, LINEAGE)


@dataclass
class Proof:
    """Each gate's checks; a gate holds when none of its checks failed."""

    checks: dict[str, list[Check]] = field(default_factory=lambda: {gate: [] for gate in GATES})

    def add(self, gate: str, check: Check) -> None:
        self.checks[gate].append(check)

    def failed_checks(self, gate: str) -> list[Check]:
        return [c for c in self.checks[gate] if c.state in (State.CHANGED, State.MISSING, State.INCOMPLETE)]

    @property
    def failed(self) -> list[str]:
        return [gate for gate in GATES if self.failed_checks(gate)]

    @property
    def passed(self) -> list[str]:
        return [gate for gate in GATES if not self.failed_checks(gate)]

    def reasons(self) -> list[str]:
        return [
            f"{gate}: {c.item}: {c.state.value}" + (f" ({c.detail})" if c.detail else "")
            for gate in self.failed
            for c in self.failed_checks(gate)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "checks": [
                {"gate": gate, "item": c.item, "state": c.state.value, "detail": c.detail}
                for gate in GATES
                for c in self.checks[gate]
            ],
        }


def _gate_of(item: str) -> str | None:
    if item.startswith(("result ", "model signature")):
        return WEIGHTS
    if item.startswith("evaluation"):
        return EVALUATIONS
    if item.startswith("factsheet"):
        return CARD
    if item.startswith("file "):
        return None
    return PROVENANCE


def prove(
    folder: Path, version: Version, keys: Sequence[Key], broken: Sequence[str], *, weights_streamed: bool = False
) -> Proof:
    """``weights_streamed``: the model's files were hashed as they streamed from the registry and are not in the
    folder; each is then proven by its blob's digest being the signed one (the registry names blobs by digest,
    and ``broken`` lists each whose bytes were not)."""
    proof = Proof()
    for problem in broken:
        proof.add(
            WEIGHTS if any(problem.startswith(b.path + ":") for b in version.files) else PROVENANCE,
            Check(f"blob {problem.partition(':')[0]}", State.CHANGED, problem.partition(": ")[2]),
        )
    if not version.attested:
        for gate in GATES:
            proof.add(gate, Check("attestation", State.MISSING, "an imported version: nothing the platform signed"))
        return proof
    try:
        report = verify_folder(folder, keys)
    except NoProvenanceError as e:
        proof.add(PROVENANCE, Check("provenance", State.MISSING, str(e)))
        return proof
    streamed = {f"result {b.path}" for b in version.files} if weights_streamed else set()
    for check in report.checks:
        room = _gate_of(check.item)
        if room is not None and not (check.item in streamed and check.state is State.MISSING):
            proof.add(room, check)
    try:
        statement, _ = open_signed((folder / PROVENANCE_FILE).read_bytes(), keys, PROVENANCE_FILE)
    except EnvelopeError:
        return proof
    _weights_check(proof, version, statement)
    _scan_check(proof, statement)
    rounds = _rounds(folder, keys)
    _evaluation_checks(proof, rounds)
    _card_checks(proof, folder, version, statement)
    try:
        trial, problem = signed_trial(folder, statement, keys), ""
    except TrialStatementError as e:
        trial, problem = None, str(e)
    record = lineage(statement, rounds, version.lineage.get("parent"), trial)
    same = record == version.lineage and not problem
    proof.add(
        LINEAGE,
        Check(
            "version lineage",
            State.OK if same else State.CHANGED,
            ""
            if same
            else problem
            or f"the version's config says {_differing(record, version.lineage)} other than the signed statements",
        ),
    )
    return proof


def _differing(expected: dict[str, Any], stored: dict[str, Any]) -> list[str]:
    return sorted(k for k in expected.keys() | stored.keys() if expected.get(k) != stored.get(k))


def _weights_check(proof: Proof, version: Version, statement: dict[str, Any]) -> None:
    listed = sorted(b.path for b in version.files)
    signed = weights(statement)
    if listed != signed:
        proof.add(
            WEIGHTS, Check("version files", State.CHANGED, f"the version holds {listed}, the results are {signed}")
        )
    else:
        proof.add(WEIGHTS, Check("version files", State.OK, f"{len(listed)} signed result files"))


def _scan_check(proof: Proof, statement: dict[str, Any]) -> None:
    dependencies = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    image = next((d for d in dependencies if d.get("name") == LEARNER_IMAGE), None)
    if image is None:
        proof.add(SCAN, Check("learner image", State.MISSING, "the provenance names no learner image"))
        return
    verdict = image.get("annotations", {}).get("scanVerdict")
    reference = str(image.get("uri", "")).removeprefix("docker-image://")
    if verdict == "passed":
        proof.add(SCAN, Check(f"learner image {reference}", State.OK, "its scan passed"))
    else:
        proof.add(
            SCAN,
            Check(
                f"learner image {reference}", State.CHANGED, f"scan verdict {verdict or 'none recorded'}, not passed"
            ),
        )


def _rounds(folder: Path, keys: Sequence[Key]) -> list[dict[str, Any]]:
    found = []
    for path in sorted(folder.glob(f"{ROUND_PREFIX}*{ROUND_SUFFIX}"), key=lambda p: p.name):
        if round_of(path.relative_to(folder).as_posix()) is None:
            continue
        try:
            found.append(open_signed(path.read_bytes(), keys, path.name)[0])
        except EnvelopeError:
            continue  # verify_folder names it
    return found


def _evaluation_checks(proof: Proof, rounds: Sequence[dict[str, Any]]) -> None:
    if not rounds:
        proof.add(EVALUATIONS, Check("evaluations", State.MISSING, "no signed evaluation round"))
    for statement in rounds:
        predicate = statement["predicate"]
        for evaluation in predicate["evaluations"]:
            item = f"evaluation round {predicate['round']} {evaluation['name']} ({evaluation['kind']})"
            if evaluation["verdict"] == "passed":
                proof.add(EVALUATIONS, Check(item, State.OK, "passed"))
            else:
                proof.add(EVALUATIONS, Check(item, State.CHANGED, f"{evaluation['verdict']}: {evaluation['message']}"))


def _card_checks(proof: Proof, folder: Path, version: Version, statement: dict[str, Any]) -> None:
    path = folder / CARD_FILE
    if not path.is_file():
        proof.add(CARD, Check(f"model card {CARD_FILE}", State.MISSING, "the version has no card"))
        return
    sheet = json.loads((folder / FACTSHEET_JSON).read_bytes())  # checked against the statements by verify_folder
    expected = render_card(version.name, sheet, framework_of(statement))
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        stated, attested = read_front_matter(text, CARD_FILE), read_front_matter(expected, "rendered")
    except CatalogError as e:
        proof.add(CARD, Check(f"model card {CARD_FILE}", State.CHANGED, str(e)))
        return
    same_metrics = stated_metrics(stated) == stated_metrics(attested)
    proof.add(
        CARD,
        Check(
            "model card metrics",
            State.OK if same_metrics else State.CHANGED,
            "" if same_metrics else "the card states metrics other than the attested ones",
        ),
    )
    if text == expected:
        proof.add(CARD, Check(f"model card {CARD_FILE}", State.OK))
    else:
        fields = _differing(attested, stated) or ["its prose"]
        proof.add(
            CARD, Check(f"model card {CARD_FILE}", State.CHANGED, f"not as the signed statements render it: {fields}")
        )
