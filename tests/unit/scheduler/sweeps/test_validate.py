"""`sweep validate`: the search file and its manifest, checked alone and together, as a submit checks them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.sweeps.sweepcheck import command_references

REPO = Path(__file__).resolve().parents[4]
DDP = REPO / "tests/unit/scheduler/manifests/learnerkit-pytorch-ddp.yml"
SEARCH = """\
manifest: manifests/job.yml
parameters:
  lr: {type: log_uniform, min: 1.0e-4, max: 0.1}
  width: {type: choice, values: [16, 32]}
objective: {metric: val_loss, goal: minimize}
budget: {unit: step, min: 10, max: 90}
algorithm: {name: asha, eta: 3}
trials: 9
concurrency: 3
seed: 7
"""


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    (tmp_path / "manifests").mkdir()
    text = DDP.read_text().replace("--epochs 90", "--lr ${lr} --width $width")
    (tmp_path / "manifests/job.yml").write_text(text)
    path = tmp_path / "search.yml"
    path.write_text(SEARCH)
    return path


def validate(path: Path) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["sweep", "validate", str(path), "--root", str(REPO), "-o", "json"])
    return result.exit_code, json.loads(result.output)


def test_a_good_sweep_shows_its_rungs_and_every_trial(sweep: Path) -> None:
    code, data = validate(sweep)
    assert code == 0, data
    assert data["rungs"] == [10, 30, 90]
    trials = data["trials"]
    assert isinstance(trials, list) and len(trials) == 9
    assert trials[0]["parameters"].keys() == {"lr", "width"}
    assert validate(sweep)[1] == data  # the seed fixes the trials
    people = CliRunner().invoke(cli, ["sweep", "validate", str(sweep), "--root", str(REPO)])
    assert people.exit_code == 0 and "valid: 9 trials of resnet-ddp (asha)" in people.output


def test_an_unknown_parameter_in_the_command_is_refused_naming_the_field(sweep: Path) -> None:
    manifest = sweep.parent / "manifests/job.yml"
    manifest.write_text(manifest.read_text().replace("${lr}", "${learning_rate}"))
    code, data = validate(sweep)
    assert code == 1
    assert data["problems"] == [
        {
            "file": str(manifest),
            "line": None,
            "field": "framework.command",
            "message": "${learning_rate} is not a parameter of the sweep search.yml (its parameters: lr, width)",
        }
    ]


def test_an_objective_from_a_regex_rule_is_refused_naming_the_field(sweep: Path) -> None:
    sweep.write_text(SEARCH.replace("val_loss", "train/loss"))
    code, data = validate(sweep)
    assert code == 1
    (problem,) = data["problems"]  # type: ignore[misc]
    assert (problem["file"], problem["line"], problem["field"]) == (str(sweep), 5, "objective.metric")
    assert problem["message"].startswith("'train/loss' comes from the manifest's regex rule 'train'")


def test_a_missing_manifest_is_named_with_the_search_file_s_line(sweep: Path) -> None:
    shutil.rmtree(sweep.parent / "manifests")
    code, data = validate(sweep)
    assert code == 1
    (problem,) = data["problems"]  # type: ignore[misc]
    assert (problem["file"], problem["line"], problem["field"]) == (str(sweep), 1, "manifest")


def test_command_references_skip_platform_variables_and_the_command_s_own() -> None:
    command = "for f in a b; do echo $f; done; x=1; python t.py --lr ${lr} --d $DATA_DIR --w $width --x $x"
    assert command_references(command) == {"lr", "width"}


@pytest.mark.parametrize(
    ("algorithm", "known"),
    [("{name: tpe, startup: 3}", 0), ("{name: asha, eta: 3, sampler: tpe}", 0), ("{name: hyperband, eta: 3}", 9)],
)
def test_only_the_parameters_the_search_file_fixes_are_shown(sweep: Path, algorithm: str, known: int) -> None:
    sweep.write_text(SEARCH.replace("{name: asha, eta: 3}", algorithm))
    code, data = validate(sweep)
    assert code == 0, data
    assert isinstance(data["trials"], list) and len(data["trials"]) == known
    people = CliRunner().invoke(cli, ["sweep", "validate", str(sweep), "--root", str(REPO)])
    said = "each trial's parameters are chosen from the results before it (tpe)"
    assert people.exit_code == 0 and (said in " ".join(people.output.split())) == (known == 0), people.output


def test_pbt_shows_its_first_generation(sweep: Path) -> None:
    sweep.write_text(SEARCH.replace("{name: asha, eta: 3}", "{name: pbt, population: 3}").replace("trials: 9\n", ""))
    code, data = validate(sweep)
    assert code == 0, data
    assert data["rungs"] == list(range(10, 91, 10))
    assert isinstance(data["trials"], list) and len(data["trials"]) == 3
