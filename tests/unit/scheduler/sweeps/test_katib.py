"""`sweep import katib` on experiment files written here in Katib's v1beta1 format (random, TPE, Hyperband, PBT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.scheduler.cli_sweep import sweep_group
from learnerkit.scheduler.sweeps.katib import KatibImportError, import_katib
from learnerkit.scheduler.sweeps.searchfile import parse_search_file
from learnerkit.scheduler.sweeps.space import ParamType
from learnerkit.scheduler.sweeps.spec import AlgorithmName, Goal, SamplerName

HERE = Path(__file__).parent / "katib"


def imported(name: str) -> tuple[str, list[str]]:
    path = HERE / f"{name}.yaml"
    result = import_katib(path.read_text(), path)
    return result.search_file, result.unmapped


def spec_of(text: str):  # type: ignore[no-untyped-def]
    return parse_search_file(text, HERE / "search.yml")


def test_random_maps_every_parameter_type_the_counts_and_the_seed() -> None:
    text, unmapped = imported("random")
    spec = spec_of(text)
    types = {p.name: p.type for p in spec.space.parameters}
    assert types == {
        "lr": ParamType.LOG_UNIFORM,
        "dropout": ParamType.UNIFORM,
        "num_layers": ParamType.INTEGER,
        "optimizer": ParamType.CHOICE,
        "batch_size": ParamType.CHOICE,
    }
    batch = next(p for p in spec.space.parameters if p.name == "batch_size")
    assert batch.values == (32, 64, 128)
    assert (spec.objective.metric, spec.objective.goal) == ("val_accuracy", Goal.MAXIMIZE)
    assert (spec.algorithm.name, spec.trials, spec.concurrency, spec.seed) == (AlgorithmName.RANDOM, 15, 3, 42)
    assert "--lr=${lr} --dropout=${dropout} --layers=${num_layers}" in text
    for said in ("spec.objective.goal: 0.97", "spec.maxFailedTrialCount", "'num-layers' becomes 'num_layers'"):
        assert any(said in line for line in unmapped), (said, unmapped)
    assert all(line.startswith(f"{HERE / 'random.yaml'}:") for line in unmapped), "each names its line"


def test_tpe_keeps_its_startup_and_turns_a_stepped_integer_into_its_values() -> None:
    text, unmapped = imported("tpe")
    spec = spec_of(text)
    assert (spec.algorithm.name, spec.algorithm.sampler, spec.algorithm.startup) == (
        AlgorithmName.TPE,
        SamplerName.TPE,
        6,
    )
    width = next(p for p in spec.space.parameters if p.name == "width")
    assert width.values == (16, 32, 48, 64, 80, 96, 112, 128)
    assert "python3 train.py --lr ${lr} --width ${width}" in text, "the PyTorchJob's container, args included"
    assert any("n_ei_candidates='24' has no counterpart" in line for line in unmapped)


def test_hyperband_takes_its_budget_from_the_resource_parameter() -> None:
    text, unmapped = imported("hyperband")
    spec = spec_of(text)
    assert spec.algorithm.name is AlgorithmName.HYPERBAND and spec.algorithm.eta == 3
    assert spec.space.names == ("lr", "momentum")
    assert (spec.budget.min, spec.budget.max) == (3, 27) and spec.rungs == (3, 9, 27)
    assert any("resource_name num-epochs: the budget in epochs, 3 to 27" in line for line in unmapped)


def test_pbt_keeps_population_truncation_and_resampling() -> None:
    text, unmapped = imported("pbt")
    spec = spec_of(text)
    algorithm = spec.algorithm
    assert (algorithm.name, algorithm.population, algorithm.truncation, algorithm.resample) == (
        AlgorithmName.PBT,
        4,
        0.25,
        0.3,
    )
    assert spec.trials == 20 and len(spec.rungs) == 5
    assert any("suggestion_trial_dir" in line for line in unmapped)


def test_an_unknown_algorithm_and_a_bad_number_are_refused_with_their_lines(tmp_path: Path) -> None:
    text = (HERE / "random.yaml").read_text().replace("algorithmName: random", "algorithmName: enas")
    text = text.replace('min: "0.0005"', 'min: "small"')
    path = tmp_path / "bad.yaml"
    with pytest.raises(KatibImportError) as caught:
        import_katib(text, path)
    found = [str(p) for p in caught.value.problems]
    assert any("spec.algorithm.algorithmName: 'enas' has no counterpart" in p for p in found), found
    assert any(":26: spec.parameters[0].feasibleSpace.min: expected a number; got" in p for p in found), found


def test_not_an_experiment_is_refused() -> None:
    with pytest.raises(KatibImportError, match="expected a Katib Experiment"):
        import_katib("apiVersion: batch/v1\nkind: Job\n", Path("job.yaml"))


def test_the_command_prints_to_stdout_and_writes_o_atomically(tmp_path: Path) -> None:
    runner = CliRunner()
    printed = runner.invoke(sweep_group, ["import", "katib", str(HERE / "tpe.yaml")])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.startswith("# Imported from the Katib experiment tpe.yaml")
    assert "not mapped: " in printed.stderr and "not mapped" not in printed.stdout
    out = tmp_path / "search.yml"
    written = runner.invoke(
        sweep_group, ["import", "katib", str(HERE / "tpe.yaml"), "-o", str(out), "--output", "json"]
    )
    assert written.exit_code == 0, written.output
    data = json.loads(written.stdout)
    assert out.read_text() == data["search_file"] == printed.stdout
    assert data["written"] == str(out) and data["unmapped"]
    assert [p.name for p in tmp_path.iterdir()] == ["search.yml"], "no temporary file left"
