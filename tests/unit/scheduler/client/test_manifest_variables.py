"""`${NAME}` in a manifest, filled from the caller's environment on the client (docs/manifests.md#variables):
values go in as whole YAML scalars, lines keep their numbers, an unset variable is an error naming its line, the
learner's own references stay as written, and a credential filled in is never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from learnerkit.cli import cli
from learnerkit.common.yamlfile import YamlBudget, YamlError
from learnerkit.common.yamlvars import expand_yaml
from learnerkit.scheduler.client.manifestfile import RUN_TIME_FIELDS, read_expanded, secrets_hidden
from learnerkit.scheduler.errors import ManifestError, ManifestRejectedError
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.unit.scheduler.api.test_model_upload import url
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade, view

__all__ = ["url"]  # the fixture: the scheduler's real HTTP path to a fake facade
REPO = Path(__file__).resolve().parents[4]
SOURCE = Path("manifest.yml")
MANIFEST = """\
name: ${NAME}
cpus: ${CPUS}
memory: 1Gb
data_stores:
  - id: store
    type: s3_datastore
    training_data:
      container: data
    training_results:
      container: results
    connection:
      auth_url: ${S3_ENDPOINT_URL}
      user_name: ${AWS_ACCESS_KEY_ID}
      password: ${AWS_SECRET_ACCESS_KEY}
framework:
  name: pytorch
  version: "2.13"
  command: python ${DATA_DIR}/train.py --lr ${lr} --home $HOME
evaluation_metrics:
  type: tensorboard
  in: "${JOB_STATE_DIR}/logs/tb"
"""
ENV = {
    "NAME": "mnist",
    "CPUS": "2",
    "S3_ENDPOINT_URL": "http://127.0.0.1:8333",
    "AWS_ACCESS_KEY_ID": "dev-key",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t-Value",
    "DATA_DIR": "/caller/data",
    "lr": "0.5",
    "JOB_STATE_DIR": "/caller/state",
    "HOME": "/caller/home",
}


def expand(text: str, env: dict[str, str], tmp_path: Path) -> str:
    path = tmp_path / "manifest.yml"
    path.write_text(text)
    return read_expanded(path, env).text


def test_the_manifest_is_filled_in_and_the_learners_references_stay(tmp_path: Path) -> None:
    """The shell of the learner expands its command, the sidecar `evaluation_metrics`: the caller's DATA_DIR,
    lr, HOME and JOB_STATE_DIR never replace theirs."""
    job = parse_manifest(expand(MANIFEST, ENV, tmp_path))
    store = job.data_stores[0]
    assert (job.name, job.resources.cpus, store.connection["auth_url"]) == ("mnist", 2.0, "http://127.0.0.1:8333")
    assert job.credentials() == {"store": {"user_name": "dev-key", "password": "s3cr3t-Value"}}
    assert job.framework.command == "python ${DATA_DIR}/train.py --lr ${lr} --home $HOME"
    assert job.evaluation_metrics == {"type": "tensorboard", "in": "${JOB_STATE_DIR}/logs/tb"}


def test_a_variable_that_is_not_set_is_an_error_naming_file_line_field_and_variable(tmp_path: Path) -> None:
    env = {key: value for key, value in ENV.items() if key not in ("S3_ENDPOINT_URL", "AWS_SECRET_ACCESS_KEY")}
    with pytest.raises(YamlError) as caught:
        expand(MANIFEST, env, tmp_path)
    lines = str(caught.value).splitlines()
    where = str(tmp_path / "manifest.yml")
    assert [line.split(": ", 2)[:2] for line in lines] == [
        [f"{where}:12", "data_stores[0].connection.auth_url"],
        [f"{where}:14", "data_stores[0].connection.password"],
    ]
    assert "${S3_ENDPOINT_URL}: the variable S3_ENDPOINT_URL is not set" in lines[0]


@pytest.mark.parametrize(
    ("written", "env", "value"),
    [
        ("a-$${NAME}", {}, "a-${NAME}"),
        ("$$NAME $$$$", {}, "$NAME $$"),
        ("$NAME and $ alone", {"NAME": "x"}, "$NAME and $ alone"),
        ("${NAME:-fallback}", {"NAME": ""}, "fallback"),
        ("${NAME-fallback}", {"NAME": ""}, ""),
        ("${NAME-fallback}", {}, "fallback"),
        ("${NAME:-a b: c}", {"NAME": "set"}, "set"),
        ("${A}${B}-${A}", {"A": "1", "B": "two"}, "1two-1"),
    ],
)
def test_escapes_defaults_and_bare_dollars(written: str, env: dict[str, str], value: str) -> None:
    text = expand_yaml(f'name: "{written}"\n', SOURCE, env, YamlBudget()).text
    assert yaml.safe_load(text) == {"name": value}


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("${}", "'${}' is not a reference"),
        ("${1X}", "'${1X}' is not a reference"),
        ("${X:y}", "'${X:y}' is not a reference"),
        ("${X", "'${' is not closed by '}'"),
    ],
)
def test_a_malformed_reference_is_an_error(written: str, message: str) -> None:
    with pytest.raises(YamlError, match=r"manifest\.yml:2: name: ") as caught:
        expand_yaml(f'cpus: 1\nname: "{written}"\n', SOURCE, {"X": "x"}, YamlBudget())
    assert message in str(caught.value)


@given(value=st.text(max_size=40))
@settings(max_examples=150, deadline=None)
def test_any_value_stays_one_scalar_and_every_line_keeps_its_number(value: str) -> None:
    """`: `, `#`, quotes, brackets, line breaks, unicode: the value lands whole where the reference was, in a
    quoted, a plain and a block scalar alike, and the document keeps its keys and its line count."""
    text = 'quoted: "<${V}>"\nplain: x ${V}\nblock: |\n  ${V}\n  end\nlast: 1\n'
    expanded = expand_yaml(text, SOURCE, {"V": value}, YamlBudget()).text
    assert yaml.safe_load(expanded) == {
        "quoted": f"<{value}>",
        "plain": f"x {value}",
        "block": f"{value}\nend\n",
        "last": 1,
    }
    assert expanded.count("\n") == text.count("\n")


def test_a_plain_reference_takes_the_type_its_value_would_have_written_there() -> None:
    text = "a: ${V}\nb: '${V}'\nc: !!str ${V}\nd: ${T}\ne: ${E}\nf: ${D}\ng: ${F}\n"
    env = {"V": "4", "T": "true", "E": "", "D": "2024-02-03 10:00:00", "F": "1:30"}
    assert yaml.safe_load(expand_yaml(text, SOURCE, env, YamlBudget()).text) == {
        "a": 4,
        "b": "4",
        "c": "4",
        "d": True,
        "e": None,
        "f": yaml.safe_load("x: 2024-02-03 10:00:00")["x"],
        "g": 90,
    }


def test_an_anchor_keeps_its_alias_and_keys_are_never_expanded() -> None:
    text = "a: &one ${V}\nb: *one\n${V}: 2\n"
    expanded = expand_yaml(text, SOURCE, {"V": "x: y"}, YamlBudget()).text
    assert yaml.safe_load(expanded) == {"a": "x: y", "b": "x: y", "${V}": 2}


def test_later_problems_point_at_the_users_lines() -> None:
    """A multi-line value filled in (a block scalar, a folded quoted one) moves no line below it."""
    text = MANIFEST.replace("name: ${NAME}", 'name: "${NAME}\n  folded"').replace("memory: 1Gb", "memory: lots")
    text = text.replace("cpus: ${CPUS}", "description: |\n  ${NAME}\n  more\ncpus: ${CPUS}")
    env = ENV | {"NAME": "two\nlines: here # not a comment"}
    expanded = expand_yaml(text, SOURCE, env, YamlBudget(), verbatim=RUN_TIME_FIELDS)
    with pytest.raises(ManifestError) as caught:
        parse_manifest(expanded.text, str(SOURCE))
    (problem,) = caught.value.problems
    assert (problem.line, problem.loc) == (text.splitlines().index("memory: lots") + 1, ("memory",))


def test_the_same_reference_in_a_manifest_reaching_the_parser_is_refused_as_before() -> None:
    """What the scheduler runs: the text as it arrives, read by the same parser, never filled in."""
    with pytest.raises(ManifestError) as caught:
        parse_manifest(MANIFEST.replace("${CPUS}", "1"), "manifest.yml")
    messages = [str(problem) for problem in caught.value.problems]
    assert (
        "manifest.yml:12: data_stores[0].connection.auth_url: '${S3_ENDPOINT_URL}' is not an http(s) URL" in messages[0]
    )


def test_a_credential_filled_in_is_masked_in_every_problem(tmp_path: Path) -> None:
    """A numeric secret read as a number is refused naming the field, never showing the value; a rejection
    from the scheduler that quoted it is masked as well."""
    secret = "8675309123"
    path = tmp_path / "manifest.yml"
    path.write_text(MANIFEST)
    expanded = read_expanded(path, ENV | {"AWS_SECRET_ACCESS_KEY": secret})
    with pytest.raises(ManifestError) as caught, secrets_hidden(expanded):
        parse_manifest(expanded.text, str(path))
    assert secret not in str(caught.value)
    said = "data_stores[0].connection.password: expected a string; got a number (not repeated here: it is a credential)"
    assert said in str(caught.value)
    refused = [{"file": "manifest.yml", "line": 14, "field": "password", "message": f"bad {secret}"}]
    with pytest.raises(ManifestRejectedError) as rejected, secrets_hidden(expanded):
        raise ManifestRejectedError("refused", refused)
    assert secret not in str(rejected.value) and secret not in repr(rejected.value.problems)


def test_job_validate_fills_in_the_shipped_example_from_the_shell_and_never_prints_its_keys(tmp_path: Path) -> None:
    """As a new user runs it after `eval "$(learnerkit dev env)"`: the real command, in a process of its own."""
    learnerkit = Path(sys.executable).parent / "learnerkit"
    example = "examples/digits-evaluated/manifest.yml"
    shell = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "COLUMNS": "200"}
    dev_env = {key: ENV[key] for key in ("S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}

    def validate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(learnerkit), "job", "validate", example, *args]
        return subprocess.run(argv, cwd=REPO, env=shell | env, capture_output=True, text=True, timeout=120)

    valid = validate(dev_env, "--output", "json")
    assert valid.returncode == 0, valid.stdout + valid.stderr
    connection = json.loads(valid.stdout)["manifest"]["data_stores"][0]["connection"]
    assert connection["auth_url"] == ENV["S3_ENDPOINT_URL"]
    shown = validate(dev_env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for output in (valid, shown):
        assert ENV["AWS_SECRET_ACCESS_KEY"] not in output.stdout + output.stderr

    unset = validate({key: value for key, value in dev_env.items() if key != "S3_ENDPOINT_URL"})
    assert unset.returncode == 1
    assert (
        f"{example}:25: data_stores[0].connection.auth_url: ${{S3_ENDPOINT_URL}}: the variable S3_ENDPOINT_URL is not"
        " set" in unset.stderr
    ), unset.stderr


def test_aliases_that_stand_for_too_many_values_are_refused_before_they_are_walked() -> None:
    """Nine lists of nine aliases of the one before: 9^9 places from 90 nodes."""
    lines = ['a0: ["${V}", "${V}", "${V}", "${V}", "${V}", "${V}", "${V}", "${V}", "${V}"]']
    lines[0] = "a0: &a0 " + lines[0].removeprefix("a0: ")
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)]
    with pytest.raises(YamlError, match=r"more than 20000 values \(alias expansion\?\)"):
        expand_yaml("\n".join(lines) + "\n", SOURCE, {"V": "x"}, YamlBudget(max_nodes=20_000))


def test_sweep_validate_fills_in_the_search_file_and_its_manifest(tmp_path: Path) -> None:
    """The trial manifest's `${lr}` stays the sweep's parameter even where the caller's shell sets `lr`."""
    (tmp_path / "manifests").mkdir()
    manifest = (REPO / "tests/unit/scheduler/manifests/learnerkit-pytorch-ddp.yml").read_text()
    manifest = manifest.replace("https://s3.lab.example:8333", "${S3_ENDPOINT_URL}").replace(
        "--epochs 90", "--lr ${lr}"
    )
    (tmp_path / "manifests/job.yml").write_text(manifest)
    search = tmp_path / "search.yml"
    search.write_text(
        "manifest: ${MANIFESTS}/job.yml\nparameters:\n  lr: {type: choice, values: [0.1, 0.2]}\n"
        "objective: {metric: val_loss, goal: minimize}\nbudget: {unit: step, min: 1, max: 9}\n"
        "algorithm: {name: asha}\ntrials: ${TRIALS}\n"
    )
    env = {"S3_ENDPOINT_URL": "https://s3.lab.example:8333", "MANIFESTS": "manifests", "TRIALS": "2", "lr": "9"}

    def validate(env: dict[str, str]) -> tuple[int, dict[str, object]]:
        argv = ["sweep", "validate", str(search), "--root", str(REPO), "-o", "json"]
        result = CliRunner().invoke(cli, argv, env=env)
        return result.exit_code, json.loads(result.output)

    code, data = validate(env)
    assert code == 0, data
    trials = data["trials"]
    assert isinstance(trials, list) and len(trials) == 2 and trials[0]["parameters"]["lr"] in (0.1, 0.2)
    code, data = validate(env | {"S3_ENDPOINT_URL": None})  # type: ignore[dict-item]  # CliRunner unsets it
    assert code == 1
    message = (
        "${S3_ENDPOINT_URL}: the variable S3_ENDPOINT_URL is not set; set it, give a default "
        "(${S3_ENDPOINT_URL:-default}), or write $${ for a literal ${"
    )
    assert data["problems"] == [
        {"file": str(tmp_path / "manifests/job.yml"), "line": line, "field": field, "message": message}
        for line, field in ((19, "data_stores[0].connection.auth_url"), (28, "data_stores[1].connection.auth_url"))
    ]


def test_job_submit_sends_the_text_validate_checks(
    url: str, fake: FakeFacade, tenants: Tenants, tmp_path: Path
) -> None:
    path = tmp_path / "manifest.yml"
    path.write_text(MANIFEST)
    env = ENV | {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": tenants.a}
    result = CliRunner().invoke(cli, ["job", "submit", str(path), "--output", "json"], env=env)
    assert result.exit_code == 0, result.output
    sent = fake.jobs[json.loads(result.output)["job_id"]].manifest
    assert sent == read_expanded(path, ENV).text
    assert sent.count("\n") == MANIFEST.count("\n") and "auth_url: " + '"http://127.0.0.1:8333"' in sent
    assert "command: python ${DATA_DIR}/train.py --lr ${lr} --home $HOME" in sent


def test_job_evaluate_fills_in_its_evaluations_file(
    url: str, fake: FakeFacade, tenants: Tenants, tmp_path: Path
) -> None:
    fake.add(view("job-7", "team-a", status="COMPLETED"))
    path = tmp_path / "evaluations.yml"
    path.write_text(
        "evaluations:\n  - name: ${EVALUATION}\n    kind: robustness\n"
        "    data: {file: digits-eval.csv, label: label}\n    attacks: [fgsm]\n    epsilons: [0.1]\n"
    )
    env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": tenants.a}
    argv = ["job", "evaluate", "job-7", str(path), "--output", "json"]
    result = CliRunner().invoke(cli, argv, env=env | {"EVALUATION": "strict-robustness"})
    assert result.exit_code == 0, result.output
    assert [e["name"] for e in json.loads(result.output)["evaluations"]] == ["strict-robustness"]
    unset = CliRunner().invoke(cli, argv, env=env)
    assert unset.exit_code == 1
    assert json.loads(unset.output)["problems"][0]["line"] == 2
