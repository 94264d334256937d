"""The manifest's catalog: field carried out by the scheduler, over the fake facade: a round that passed registers
the job's stored outputs (its checkpoints left out) under the field's name and alias, the reason in the job's
status; a round that did not pass registers nothing and says which evaluation missed; a refusal, a job not
tracked and a scheduler without a catalog each say so or do nothing. The parser's checks of the field."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from controller_sidecar.endpoints import Endpoints
from learnerkit.scheduler.catalog.errors import CatalogError
from learnerkit.scheduler.core.registering import ModelRegistering, Registrar
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.evaluations.plan import EvaluatedJob
from learnerkit.scheduler.evaluations.record import EvaluationOutcome, EvaluationRound
from learnerkit.scheduler.facade import JobView
from learnerkit.scheduler.manifest.catalogfield import CatalogSpec
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.fakefacade import MANIFEST, FakeFacade

EVALUATIONS = """\
evaluations:
  - name: robust
    kind: robustness
    data: {file: eval/digits.csv, label: label}
    attacks: [fgsm]
    epsilons: [0.1]
"""
CATALOG = "catalog:\n  name: digits\n  alias: candidate\n"
TEXT = MANIFEST.format(gpus=1) + EVALUATIONS + CATALOG
FILES = {
    "attempt-1/learner-1/results/model.bin": b"weights",
    "attempt-1/learner-1/checkpoints/step-1.pt": b"a checkpoint",
    "provenance/provenance.intoto.json": b"{}",
}


class Registered:
    def __init__(self, refuse: str = "") -> None:
        self.calls: list[tuple[str, str, CatalogSpec, dict[str, bytes]]] = []
        self.refuse = refuse

    def __call__(
        self, tenant: str, job_id: str, spec: CatalogSpec, folder: Path, trial: Mapping[str, Any] | None
    ) -> str:
        if self.refuse:
            raise CatalogError(self.refuse)
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        self.calls.append((tenant, job_id, spec, files))
        return f"{spec.name}@sha256:{'a' * 64}, alias {spec.alias}"


def _round(outcome: str) -> EvaluationRound:
    manifest = parse_manifest(TEXT)
    started = EvaluationRound.start("job-1", 1, 1, manifest.evaluations)
    return started.settled(0, EvaluationOutcome("robust", "robustness", outcome, "why"))  # type: ignore[arg-type]


def _run(
    outcome: str,
    registrar: Registrar | None,
    tenant: str | None = "team-a",
    fake: FakeFacade | None = None,
    text: str = TEXT,
) -> list[tuple[str, str]]:
    fake = fake or FakeFacade()
    fake.add(JobView("job-1", "team-a", "mnist", "COMPLETED"), files=FILES)
    reasons: list[tuple[str, str]] = []

    async def record(job_id: str, reason: str) -> None:
        reasons.append((job_id, reason))

    job = EvaluatedJob("job-1", parse_manifest(text), Endpoints("127.0.0.1:2379"), text, "manifest.yml")
    registering = ModelRegistering(fake, lambda _job: tenant, record, registrar)
    asyncio.run(registering.round_signed(job, _round(outcome)))
    return reasons


def test_a_round_that_passed_registers_the_jobs_stored_outputs_and_says_so() -> None:
    registered = Registered()
    reasons = _run("passed", registered)
    [(tenant, job_id, spec, files)] = registered.calls
    assert (tenant, job_id, spec) == ("team-a", "job-1", CatalogSpec("digits", "candidate"))
    assert set(files) == {"attempt-1/learner-1/results/model.bin", "provenance/provenance.intoto.json"}
    assert reasons == [("job-1", f"model registered: digits@sha256:{'a' * 64}, alias candidate")]


def test_the_alias_moves_under_the_models_lock_as_any_move_through_the_scheduler() -> None:
    fake = FakeFacade()
    held: list[bool] = []

    def registrar(tenant: str, job_id: str, spec: CatalogSpec, folder: Path, trial: Mapping[str, Any] | None) -> str:
        held.append(fake.model_locks["team-a/digits"].locked())
        return f"{spec.name}@sha256:{'a' * 64}, alias {spec.alias}"

    _run("passed", registrar, fake=fake)
    assert held == [True] and ("hold_model", "team-a/digits") in fake.calls
    assert not fake.model_locks["team-a/digits"].locked()


def test_a_registration_that_moves_no_alias_takes_no_lock() -> None:
    fake, registered = FakeFacade(), Registered()
    reasons = _run("passed", registered, fake=fake, text=TEXT.replace("  alias: candidate\n", ""))
    assert [spec for _, _, spec, _ in registered.calls] == [CatalogSpec("digits", None)]
    assert reasons == [("job-1", f"model registered: digits@sha256:{'a' * 64}, alias None")]
    assert not [call for call in fake.calls if call[0] == "hold_model"]


def test_a_round_that_did_not_pass_registers_nothing_and_the_status_names_the_evaluation() -> None:
    registered = Registered()
    reasons = _run("failed", registered)
    assert registered.calls == []
    assert reasons == [("job-1", "model not registered as digits: evaluation round 1 did not pass (robust failed)")]


def test_a_refusal_no_catalog_and_a_forgotten_job_each_say_so_or_do_nothing() -> None:
    refused = _run("passed", Registered(refuse="the job does not verify, nothing registered: provenance: changed"))
    assert refused == [
        ("job-1", "model not registered as digits: the job does not verify, nothing registered: provenance: changed")
    ]
    [(_, none)] = _run("passed", None)
    assert "no model catalog (LEARNERKIT_CATALOG_REGISTRY)" in none
    assert _run("passed", Registered(), tenant=None) == []


@pytest.mark.parametrize(
    ("section", "field", "says"),
    [
        ("catalog:\n  name: Digits\n", "catalog.name", "lower-case letters and digits"),
        ("catalog:\n  name: digits\n  alias: v-1\n", "catalog.alias", "the catalog's own tags"),
        ("catalog:\n  alias: candidate\n", "catalog.name", "required"),
        ("catalog:\n  name: digits\n  stage: prod\n", "catalog", "stage"),
    ],
)
def test_the_parser_refuses_a_bad_catalog_field_naming_it(section: str, field: str, says: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(MANIFEST.format(gpus=1) + EVALUATIONS + section)
    text = (
        str(caught.value) + " " + " ".join(f"{'.'.join(map(str, p.loc))}: {p.message}" for p in caught.value.problems)
    )
    assert field in text and says in text, text


def test_a_catalog_field_without_evaluations_is_refused_and_a_good_one_is_kept() -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(MANIFEST.format(gpus=1) + CATALOG)
    assert any("needs an evaluations: section" in p.message for p in caught.value.problems)
    manifest = parse_manifest(TEXT)
    assert manifest.catalog == CatalogSpec("digits", "candidate")
    assert manifest.to_dict()["catalog"] == {"name": "digits", "alias": "candidate"}
