"""The image gate: the test and scan records' verdict, unless the settings trust the image; refusals name the field."""

from __future__ import annotations

import pytest

from learnerkit.common.errors import ConfigError
from learnerkit.common.project import find_project_root
from learnerkit.common.yamlfile import format_field_path
from learnerkit.scheduler.errors import JobStateError, ManifestError
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.images.gate import ImageGate
from learnerkit.scheduler.manifest.model import JobManifest
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit_build.publish.push import PublishRefused
from tests.unit.conftest import MakeProject

MANIFEST = """\
name: j
cpus: 1
memory: 1Gb
data_stores:
  - {id: s, type: s3_datastore, training_data: {container: d}, training_results: {container: r},
     connection: {auth_url: "http://s3:8333", user_name: a, password: b}}
framework: {name: custom, version: "registry.local/team/train:1", command: run}
"""


def failed_scan(reference: str) -> None:
    raise PublishRefused(f"scan gate: the scan of {reference} (sha256:ab) failed; see report.json")


def test_an_image_that_failed_the_scan_gate_is_refused_with_the_verdict() -> None:
    assert ImageGate(check=failed_scan).verdict("registry.local/team/train:1") == (
        "scan gate: the scan of registry.local/team/train:1 (sha256:ab) failed; see report.json"
    )


@pytest.mark.parametrize(
    "gate",
    [
        ImageGate(allowlist=["registry.local/team/*:*"], check=failed_scan),
        ImageGate(trusted=["registry.local/team/train:1"], check=failed_scan),
        ImageGate(check=lambda reference: None),
    ],
    ids=["allowlisted", "trusted", "passed"],
)
def test_allowlisted_trusted_and_passed_images_run(gate: ImageGate) -> None:
    assert gate.verdict("registry.local/team/train:1") is None


def test_the_gated_resolver_names_the_manifest_field_that_chose_the_image() -> None:
    def resolve(manifest: JobManifest) -> str:
        return manifest.image or "learnerkit/pytorch:2.13-cpu-py3.11"

    resolver = ImageGate(allowlist=["other/*"], check=failed_scan).gated(resolve)
    with pytest.raises(ManifestError) as custom:
        resolver(parse_manifest(MANIFEST))
    with pytest.raises(ManifestError) as named:
        resolver(parse_manifest(MANIFEST + "learnerkit: {image: 'evil/miner:1'}\n"))
    assert [format_field_path(p.loc) for p in custom.value.problems] == ["framework.version"]
    assert [format_field_path(p.loc) for p in named.value.problems] == ["learnerkit.image"]
    assert "may not run here: scan gate: the scan of evil/miner:1" in str(named.value)


def test_a_checked_image_is_deployed_by_the_id_the_gate_checked() -> None:
    """What passed the gate is what runs: a tag moved after the check cannot swap the image."""
    gate = ImageGate(check=lambda reference: "sha256:" + "c" * 64, pin_ids=True)
    resolved = gate.gated(lambda manifest: "registry.local/team/train:1")(parse_manifest(MANIFEST))
    assert resolved == "sha256:" + "c" * 64
    assert gate.named(resolved) == "registry.local/team/train:1", "the reference stays known (its Python)"


@pytest.mark.parametrize(
    "gate",
    [
        ImageGate(trusted=["registry.local/team/train:1"], check=failed_scan, pin_ids=True),
        ImageGate(check=lambda reference: "sha256:" + "c" * 64),
    ],
    ids=["trusted, never checked", "not pinning (Kubernetes pulls by reference)"],
)
def test_unchecked_or_unpinned_images_are_deployed_by_reference(gate: ImageGate) -> None:
    resolved = gate.gated(lambda manifest: "registry.local/team/train:1")(parse_manifest(MANIFEST))
    assert resolved == "registry.local/team/train:1" and gate.named(resolved) == resolved


def test_an_evaluator_image_passes_the_same_gate() -> None:
    """An evaluation's image is a learner image like the others: refused with the verdict, pinned when checked."""
    evaluator = {"robustness": "learnerkit/robustness:1.20-cpu-py3.11"}.__getitem__
    with pytest.raises(JobStateError, match=r"evaluator image learnerkit/robustness:1.20-cpu-py3.11 .*scan gate"):
        ImageGate(check=failed_scan).gated_evaluator(evaluator)("robustness")
    pinned = ImageGate(check=lambda reference: "sha256:" + "e" * 64, pin_ids=True)
    assert pinned.gated_evaluator(evaluator)("robustness") == "sha256:" + "e" * 64
    assert ImageGate(trusted=[evaluator("robustness")], check=failed_scan).gated_evaluator(evaluator)("robustness") == (
        evaluator("robustness")
    )


def test_the_catalog_names_the_evaluator_of_a_kind_and_no_training_image() -> None:
    catalog = ImageCatalog(find_project_root())
    assert catalog.evaluator("robustness").startswith("learnerkit/robustness:")
    assert catalog.evaluator("fairness").startswith("learnerkit/fairness:")
    with pytest.raises(ConfigError, match="evaluation kind pytorch: no evaluator image"):
        catalog.evaluator("pytorch")


EVALUATOR_YAML = """\
name: judge
description: an evaluator with two versions, the older listed first
smoke:
  kind: evaluation
  command: ["python", "/opt/learner/smoke/evaluate.py"]
versions:
  "1.9":
    python: "3.11"
    variants:
      cpu: {accelerator: cpu, pip: {packages: ["six==1.17.0"]}}
  "1.20":
    python: "3.11"
    variants:
      cpu: {accelerator: cpu, pip: {packages: ["six==1.17.0"]}}
"""


def test_an_evaluator_with_two_versions_runs_its_newest(make_project: MakeProject) -> None:
    """1.20 is newer than 1.9 (numbers, not text), wherever framework.yaml lists it."""
    catalog = ImageCatalog(make_project(EVALUATOR_YAML, name="judge"), registry="registry.local:5000")
    assert catalog.evaluator("judge") == "registry.local:5000/learnerkit/judge:1.20-cpu-py3.11"
