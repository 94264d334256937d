"""A new kind of evaluation is one folder: a copy of the project with one more evaluator folder, declaring a kind
no code names, is parsed, refused where wrong, planned with its image and command, recorded, judged, reported,
verdicted and shown by the project's code as it is (docs/evaluations.md, "Declaring a kind")."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller_sidecar.endpoints import Endpoints
from learner.evaluation.report import Failure, Report, summary_text
from learner.evaluation.spec import KindSpec, spec_from_dict, spec_to_dict
from learnerkit.cli import cli
from learnerkit.common.errors import ConfigError
from learnerkit.common.project import ROOT_ENV
from learnerkit.scheduler.console.trust_views import _thresholds
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.verdicts import model_verdict
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.evaluations.plan import EvaluatedJob, plan_evaluation
from learnerkit.scheduler.evaluations.record import EvaluationOutcome, EvaluationRound
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.manifest.evaluations import parse_evaluations_text
from learnerkit.scheduler.manifest.kinds import installed_kinds, load_kinds
from learnerkit.scheduler.manifest.parser import parse_manifest

REPO = Path(__file__).resolve().parents[3]
EVALUATORS = ("robustness", "fairness")
CALIBRATION = """\
kind: calibration
description: how far the model's probabilities are from its accuracy, and conformal coverage
command: python /opt/learner/evaluator/calibrate.py --bins-from-spec
fields:
  bins: {type: integer, min: 2, max: 100, default: 15}
  levels:
    type: list
    required: true
    unique: true
    sorted: true
    help: conformal levels above 0 and at most 1
    item: {type: number, above: 0, max: 1}
  method: {type: choice, values: [temperature, none], noun: method, default: none}
metrics:
  expected_calibration_error: {direction: lower, min: 0, max: 1}
  coverage: {direction: higher, min: 0, max: 1}
thresholds:
  form: list
  at: {level: levels}
  bounds: {max_ece: expected_calibration_error, min_coverage: coverage}
"""
MANIFEST = """\
name: j
cpus: 1
memory: 1Gb
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: data/train}
    training_results: {container: results/team}
    connection: {auth_url: "http://127.0.0.1:8333", user_name: a, password: b}
framework: {name: custom, version: img, command: run}
evaluations:
  - name: calibrated
    kind: calibration
    data: {file: eval/digits.csv, label: label}
    levels: [0.95, 0.9]
    thresholds:
      - {level: 0.9, max_ece: 0.05, min_coverage: 0.88}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project's learner_base and evaluator folders, plus `frameworks/calibration/`: robustness's image recipe
    under another name and a declaration of its own; nothing else differs. The code finds it as the project root."""
    root = tmp_path / "project"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "learner_base", root / "learner_base", ignore=skip)
    for name in EVALUATORS:
        shutil.copytree(REPO / "frameworks" / name, root / "frameworks" / name, ignore=skip)
    folder = root / "frameworks" / "calibration"
    shutil.copytree(REPO / "frameworks" / "robustness", folder, ignore=shutil.ignore_patterns("__pycache__", "lock"))
    recipe = folder / "framework.yaml"
    recipe.write_text(re.sub(r"^name: robustness$", "name: calibration", recipe.read_text(), flags=re.M))
    (folder / "evaluation.yaml").write_text(CALIBRATION, encoding="utf-8")
    monkeypatch.setenv(ROOT_ENV, str(root))
    return root


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text)
    return [str(p) for p in caught.value.problems]


def test_the_repository_has_no_kind_the_copy_adds() -> None:
    assert "calibration" not in load_kinds(REPO).kinds
    assert load_kinds(REPO).names[:2] == EVALUATORS


def test_a_kind_added_as_one_folder_is_parsed_and_round_trips(project: Path) -> None:
    (spec,) = parse_manifest(MANIFEST).evaluations
    assert isinstance(spec, KindSpec) and spec.kind == "calibration"
    assert spec.fields == {
        "bins": 15,
        "levels": [0.9, 0.95],
        "method": "none",
        "thresholds": [{"level": 0.9, "max_ece": 0.05, "min_coverage": 0.88}],
    }
    assert spec_from_dict(json.loads(json.dumps(spec_to_dict(spec))), known=("calibration",)) == spec
    text = MANIFEST.split("evaluations:\n", 1)[1]
    assert parse_evaluations_text(f"evaluations:\n{text}", "evaluations.yml") == (spec,)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "kind: calibration",
            "kind: calibrate",
            r":13: evaluations\[0\]\.kind: unknown value 'calibrate'; valid: "
            r"robustness, fairness, calibration",
        ),
        (
            "levels: [0.95, 0.9]",
            "levels: [0.95, 0.9]\n    attacks: [fgsm]",
            r":16: evaluations\[0\]\.attacks: "
            r"unknown key 'attacks' for kind calibration; it is a field of robustness evaluations",
        ),
        (
            "min_coverage: 0.88",
            "min_accuracy: 0.88",
            r":17: evaluations\[0\]\.thresholds\[0\]\.min_accuracy: "
            r"unknown key 'min_accuracy': calibration evaluations produce no accuracy; bounds: max_ece "
            r"\(expected_calibration_error\), min_coverage \(coverage\)",
        ),
        ("max_ece: 0.05", "max_ece: 2", r"thresholds\[0\]\.max_ece: must be between 0 and 1; got 2"),
        ("level: 0.9,", "level: 0.5,", r"thresholds\[0\]\.level: 0\.5 is not among this evaluation's levels"),
        ("levels: [0.95, 0.9]", "levels: [0.95, 1.5]", r"evaluations\[0\]\.levels\[1\]: must be at most 1; got 1.5"),
        ("levels: [0.95, 0.9]", "levels: [0.95, 0.9]\n    bins: 1", r"evaluations\[0\]\.bins: must be at least 2"),
        ("levels: [0.95, 0.9]", "levels: [0.95, 0.9]\n    method: platt", r"\.method: unknown method 'platt'"),
    ],
)
def test_bad_input_of_the_new_kind_is_refused_naming_field_and_line(
    project: Path, old: str, new: str, expected: str
) -> None:
    assert old in MANIFEST
    found = problems(MANIFEST.replace(old, new, 1))
    assert any(re.search(expected, p) for p in found), found


def test_the_new_kind_runs_its_folders_image_and_command(project: Path) -> None:
    catalog = ImageCatalog(project)
    assert catalog.evaluator("calibration").startswith("learnerkit/calibration:")
    assert catalog.evaluator("robustness").startswith("learnerkit/robustness:")
    endpoints = Endpoints("127.0.0.1:2379", s3_endpoint_url="http://127.0.0.1:8333", s3_access_key="a")
    job = EvaluatedJob("job-1", parse_manifest(MANIFEST), endpoints, MANIFEST, "manifest.yml")
    (spec,) = job.manifest.evaluations
    plan = plan_evaluation(job, 1, 1, 0, spec, "evaluator:1", Platform("127.0.0.1:2379", "sidecar:1"), "")
    [pair] = plan.learners
    assert pair.command == "python /opt/learner/evaluator/calibrate.py --bins-from-spec"
    assert json.loads(pair.learner_env["EVALUATION_SPEC"])["levels"] == [0.9, 0.95]


def test_the_new_kind_is_recorded_reported_and_verdicted(project: Path) -> None:
    (spec,) = parse_manifest(MANIFEST).evaluations
    started = EvaluationRound.start("job-1", 1, 1, (spec,))
    assert EvaluationRound.from_raw("job-1", json.loads(json.dumps(started.to_raw()))) == started
    failure = Failure("coverage", 0.81, ">= 0.88", {"level": 0.9})
    report = Report("calibrated", "calibration", (failure,), {"expected_calibration_error": 0.02, "method": "none"})
    assert summary_text(report).splitlines() == [
        "evaluation calibrated (calibration): FAILED",
        "  missed: coverage = 0.8100 (level 0.9), threshold >= 0.88",
        "expected_calibration_error: 0.0200",
        "method: none",
    ]
    failures = tuple(report.to_dict()["failures"])
    ended = started.settled(0, EvaluationOutcome("calibrated", "calibration", "failed", "", failures))
    assert ended.judges("calibrated") == "the model"
    assert model_verdict(JobStatus.COMPLETED, True, ended) == (
        "rejected (calibrated: coverage 0.81 (level 0.9), wants >= 0.88)"
    )
    assert _thresholds(spec_to_dict(spec)) == (("level 0.9", "ece <= 0.05 and coverage >= 0.88"),)


def test_a_declaration_that_is_wrong_is_refused_naming_its_file_and_line(project: Path) -> None:
    path = project / "frameworks" / "calibration" / "evaluation.yaml"
    path.write_text(CALIBRATION.replace("direction: higher", "direction: up").replace("type: integer", "type: int"))
    with pytest.raises(ConfigError, match=r"evaluation.yaml:5: fields\.bins\.type: unknown value 'int'") as caught:
        load_kinds(project)
    assert re.search(r"evaluation.yaml:16: metrics\.coverage\.direction: unknown value 'up'", str(caught.value))
    assert installed_kinds(REPO).names[:2] == EVALUATORS


def test_no_code_of_the_platform_spells_a_kind() -> None:
    """The scheduler and the build tool take every kind from its declaration: no string in their code (their
    docstrings and comments aside) names an installed kind. The learner helper's typed specs are the evaluators'."""
    kinds = re.compile(rf"\b({'|'.join(load_kinds(REPO).names)})\b")
    spelled = []
    for path in sorted([*(REPO / "learnerkit").rglob("*.py"), *(REPO / "build").rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        documentation = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        spelled += [
            f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in documentation
            and kinds.search(node.value)
        ]
    assert spelled == []


def test_job_validate_takes_the_kinds_of_its_root(project: Path, tmp_path: Path) -> None:
    path = tmp_path / "manifest.yml"
    path.write_text(MANIFEST, encoding="utf-8")
    runner = CliRunner()
    command = ["job", "validate", str(path), "--root", str(project), "--output", "json"]
    result = runner.invoke(cli, command, env={ROOT_ENV: str(REPO)})
    assert result.exit_code == 0, result.output
    (checked,) = json.loads(result.output)["manifest"]["evaluations"]
    assert (checked["kind"], checked["levels"], checked["bins"]) == ("calibration", [0.9, 0.95], 15)
    refused = runner.invoke(cli, [*command[:4], str(REPO), *command[5:]], env={ROOT_ENV: str(REPO)})
    assert refused.exit_code == 1
    (problem,) = json.loads(refused.output)["problems"]
    assert {key: problem[key] for key in ("line", "field")} == {"line": 13, "field": "evaluations[0].kind"}
    assert problem["message"].startswith("unknown value 'calibration'; valid: robustness, fairness")
