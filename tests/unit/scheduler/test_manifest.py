"""FfDL manifests load unchanged; every bad manifest is refused naming `file:line: field.path`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.cli_job import framework_catalog
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest import DistributedMode, JobManifest
from learnerkit.scheduler.manifest_parser import load_manifest, parse_manifest
from learnerkit.scheduler.units import format_size, parse_size

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = Path(__file__).parent / "manifests"
# The versions FfDL's examples name, as if this project built those images.
FFDL_CATALOG = {"tensorflow": {"1.5.0", "1.5.0-py3"}, "caffe": {"cpu", "gpu"}, "pytorch": {"latest"}}
CATALOG = {"pytorch": {"2.13", "2.13-cpu", "2.13-cuda"}, "tensorflow": {"2.21", "2.21-cpu"}, "mxnet": {"1.9.1"}}

BASE = """\
name: mnist
description: a test job
version: "1.0"
cpus: 1
gpus: 0
memory: 1Gb
learners: 1
data_stores:
  - id: store
    type: s3_datastore
    training_data:
      container: data
    training_results:
      container: results
    connection:
      auth_url: http://127.0.0.1:8333
      user_name: key
      password: secret
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, catalog=CATALOG)
    lines = [str(p) for p in caught.value.problems]
    assert str(caught.value) == "\n".join(lines)
    return lines


def only_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


# --- FfDL's own manifests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "memory", "mode", "learners", "gpus"),
    [
        ("ffdl-tf-mount-cos.yml", 10**9, "mount", 1, 0),
        ("ffdl-tf-s3-copy.yml", 1000 * 2**20, "copy", 1, 0),
        ("ffdl-tf-hostmount.yml", 10**9, "mount", 1, 0),
        ("ffdl-caffe-gpu.yml", 1000 * 2**20, "mount", 1, 1),
        ("ffdl-custom-pytorch-dist.yml", 16 * 10**9, "mount", 2, 1),
    ],
)
def test_ffdl_example_manifests_load_unchanged(fixture: str, memory: int, mode: str, learners: int, gpus: int) -> None:
    job = load_manifest(MANIFESTS / fixture, FFDL_CATALOG)
    assert job.resources.memory_bytes == memory
    assert job.resources.learners == learners
    assert job.resources.gpus == gpus
    assert job.training_data_store.mode == mode
    assert job.extensions.distributed is DistributedMode.NONE
    assert not job.framework.command.endswith("\n")


def test_folded_command_is_one_line_and_evaluation_metrics_stay_raw() -> None:
    job = load_manifest(MANIFESTS / "ffdl-tf-mount-cos.yml", FFDL_CATALOG)
    assert job.framework.command.startswith("python3 convolutional_network.py\n  --trainImagesFile ${DATA_DIR}/")
    assert job.evaluation_metrics == {"type": "tensorboard", "in": "$JOB_STATE_DIR/logs/tb"}
    assert job.description == "Convolutional network model using tensorflow"
    assert job.version == "1.0"


def test_custom_framework_takes_its_image_from_the_version() -> None:
    job = load_manifest(MANIFESTS / "ffdl-custom-pytorch-dist.yml", CATALOG)
    assert job.name == "pytorch ddl"
    assert job.image == "tomcli/pytorch:latest"
    assert job.framework.command.startswith("./setup.sh; . env_file;")


def test_host_mount_has_no_credentials() -> None:
    job = load_manifest(MANIFESTS / "ffdl-tf-hostmount.yml", FFDL_CATALOG)
    store = job.data_stores[0]
    assert dict(store.connection) == {"type": "host_mount", "name": "host-mount", "path": "/cosdata"}
    assert job.credentials() == {}


def test_framework_the_project_does_not_build_is_refused_by_name() -> None:
    with pytest.raises(ManifestError) as caught:
        load_manifest(MANIFESTS / "ffdl-horovod.yml", framework_catalog(REPO))
    assert "ffdl-horovod.yml:24: framework.name: unknown framework 'horovod'; valid: caffe," in str(caught.value)


def test_learnerkit_manifest_loads_against_the_project_frameworks() -> None:
    job = load_manifest(MANIFESTS / "learnerkit-pytorch-ddp.yml", framework_catalog(REPO))
    ext = job.extensions
    assert (ext.priority, ext.tenant, ext.queue, ext.max_restarts, ext.auto_resume) == (10, "team-a", "gpu", 3, True)
    assert (ext.checkpoint_interval, ext.halt_grace, ext.distributed) == (600, 60, DistributedMode.DDP)
    assert job.resources.memory_bytes == 24 * 2**30
    assert job.resources.storage_bytes == 50 * 10**9
    assert job.resources.gpu_type == "nvidia-tesla-v100"
    assert job.training_data_store.id == "datasets"
    results = job.training_results_store
    assert results is not None and results.training_results == "team-a-results"
    assert (
        job.evaluation_metrics is not None and job.evaluation_metrics["groups"]["train"]["meta"]["time"] == "$timestamp"
    )


def test_spec_json_holds_no_credentials_and_credentials_are_separate() -> None:
    job = load_manifest(MANIFESTS / "learnerkit-pytorch-ddp.yml", CATALOG)
    spec = json.dumps(job.to_dict())
    for secret in ("s3cr3t-value", "other-secret", "AKIAEXAMPLE", "AKIARESULTS"):
        assert secret not in spec
        assert secret not in repr(job)
    assert job.to_dict()["data_stores"][0]["credential_keys"] == ["password", "user_name"]
    assert job.credentials() == {
        "datasets": {"user_name": "AKIAEXAMPLE", "password": "s3cr3t-value"},
        "results": {"user_name": "AKIARESULTS", "password": "other-secret"},
    }


def test_spec_json_round_trips_through_json() -> None:
    job = parse_manifest(BASE, catalog=CATALOG)
    spec = job.to_dict()
    assert json.loads(json.dumps(spec)) == spec
    assert spec["resources"] == {
        "cpus": 1.0,
        "gpus": 0,
        "gpu_type": None,
        "memory_bytes": 10**9,
        "storage_bytes": None,
        "learners": 1,
    }
    assert spec["learnerkit"]["distributed"] == "none"


def test_defaults_when_ffdl_leaves_fields_out() -> None:
    job = parse_manifest(edit("learners: 1\n", "", edit("gpus: 0\n", "")), catalog=CATALOG)
    assert isinstance(job, JobManifest)
    assert (job.resources.learners, job.resources.gpus) == (1, 0)
    assert job.extensions.tenant == "default" and job.extensions.halt_grace == 30


# --- memory units ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1Gb", 10**9),
        ("2GB", 2 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1000MiB", 1000 * 2**20),
        ("1024M", 1024 * 10**6),
        ("300mib", 300 * 2**20),
        ("1.5Gi", 3 * 2**29),
        (" 4 gb ", 4 * 10**9),
        ("1TiB", 2**40),
        ("64Ki", 64 * 1024),
    ],
)
def test_memory_units_parse_exactly(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("lots", "is not a size"),
        ("512", "has no unit"),
        ("1Gbit", "unknown unit 'Gbit'"),
        ("0MB", "must be more than 0 bytes"),
        ("0.0001kB", "not a whole number of bytes"),
        ("-1GB", "is not a size"),
    ],
)
def test_bad_memory_is_an_error_naming_the_field_not_512mb(text: str, reason: str) -> None:
    message = only_problem(edit("memory: 1Gb", f"memory: {text!r}"))
    assert message.startswith("manifest.yml:6: memory: ")
    assert reason in message


def test_memory_as_a_bare_number_is_refused() -> None:
    assert only_problem(edit("memory: 1Gb", "memory: 1024")) == (
        "manifest.yml:6: memory: expected a size with a unit such as 1Gb or 512MiB; got the number 1024"
    )


def test_format_size_picks_an_exact_unit() -> None:
    assert [format_size(n) for n in (2**30, 10**9, 1500 * 10**6, 1000 * 2**20, 7)] == [
        "1GiB",
        "1GB",
        "1500MB",
        "1000MiB",
        "7B",
    ]


# --- errors: each names its line and field path -----------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("cpus: 1", "cpus: 0", "manifest.yml:4: cpus: must be more than 0; got 0"),
        ("cpus: 1", "cpus: -2", "manifest.yml:4: cpus: must be more than 0; got -2"),
        ("cpus: 1", "cpus: lots", "manifest.yml:4: cpus: expected a number; got the string 'lots'"),
        ("cpus: 1", "cpus: true", "manifest.yml:4: cpus: expected a number; got the boolean true"),
        ("cpus: 1", "cpus: .nan", "manifest.yml:4: cpus: expected a number; got the number nan"),
        ("cpus: 1", "cpus: 1.0e-12", "manifest.yml:4: cpus: must be at least 0.01 (a hundredth of a CPU); got 1e-12"),
        ("gpus: 0", "gpus: -1", "manifest.yml:5: gpus: must be at least 0; got -1"),
        ("gpus: 0", "gpus: 0.5", "manifest.yml:5: gpus: expected a whole number; got the number 0.5"),
        ("learners: 1", "learners: 0", "manifest.yml:7: learners: must be at least 1; got 0"),
        ("learners: 1", "learners: two", "manifest.yml:7: learners: expected a whole number; got the string 'two'"),
        (
            "gpus: 0",
            "gpus: 0\ngpu_type: nvidia-tesla-k80",
            "manifest.yml:6: gpu_type: gpu_type 'nvidia-tesla-k80' needs",
        ),
        ("name: mnist\n", "", "manifest.yml:1: name: required"),
        ("name: mnist", "name: ''", "manifest.yml:1: name: must not be empty"),
        ("name: mnist", "name:", "manifest.yml:1: name: required: got an empty value"),
        ('version: "1.0"', "version: 1.10", "manifest.yml:3: version: expected a string; got the number 1.1; quote it"),
        ("learners: 1", "learners: 1\ncolour: red", "manifest.yml:8: colour: unknown key 'colour'; valid keys: name,"),
        ("  command: python train.py", "  command: '  '", "manifest.yml:22: framework.command: must not be empty"),
        ("  command: python train.py", "  command: [python, x.py]", "manifest.yml:22: framework.command: expected a"),
        (
            "  name: pytorch",
            "  name: torch",
            "manifest.yml:20: framework.name: unknown framework 'torch'; valid: mxnet,",
        ),
        ('  version: "2.13"', '  version: "1.5.0"', "manifest.yml:21: framework.version: no pytorch image '1.5.0'"),
        ("    type: s3_datastore", "    type: swift", "manifest.yml:10: data_stores[0].type: unknown value 'swift'"),
        ("    type: s3_datastore\n", "", "manifest.yml:9: data_stores[0].type: required: one of s3_datastore,"),
        (
            "      auth_url: http://127.0.0.1:8333\n",
            "",
            "manifest.yml:15: data_stores[0].connection.auth_url: required",
        ),
        (
            "http://127.0.0.1:8333",
            "127.0.0.1:8333",
            "manifest.yml:16: data_stores[0].connection.auth_url: '127.0.0.1:8333",
        ),
        (
            "      password: secret",
            "      password: 1234",
            "manifest.yml:18: data_stores[0].connection.password: expected",
        ),
        (
            "      password: secret",
            "      password: x\n      token: y",
            "manifest.yml:19: data_stores[0].connection.token",
        ),
        (
            "      container: data",
            "      container: ''",
            "manifest.yml:12: data_stores[0].training_data.container: must",
        ),
        (
            "      container: data",
            "      bucket: data",
            "manifest.yml:12: data_stores[0].training_data.bucket: unknown",
        ),
    ],
)
def test_each_error_names_line_and_field(old: str, new: str, expected: str) -> None:
    found = problems(edit(old, new))
    assert any(line.startswith(expected) for line in found), found


def test_sections_of_the_wrong_shape() -> None:
    head, _ = BASE.split("framework:\n")
    assert only_problem(head + "framework: pytorch\n") == (
        "manifest.yml:19: framework: expected a mapping with keys name, version, image_tag, command;"
        " got the string 'pytorch'"
    )
    before, after = BASE.split("data_stores:\n")
    assert only_problem(before + "data_stores: []\n" + "framework:\n" + after.split("framework:\n")[1]) == (
        "manifest.yml:8: data_stores: expected a list of at least one data store; got a list"
    )


def test_non_yaml_names_the_line() -> None:
    message = only_problem("name: [unclosed\ncpus: 1\n")
    assert message.startswith("manifest.yml:2: (document): YAML syntax error:")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "manifest.yml:1: (document): the manifest is empty"),
        ("# only a comment\n", "manifest.yml:1: (document): the manifest is empty"),
        ("- name: x\n", "manifest.yml:1: (document): expected a mapping with keys name,"),
        ("just text\n", "manifest.yml:1: (document): expected a mapping with keys name,"),
    ],
)
def test_document_that_is_not_a_mapping(text: str, expected: str) -> None:
    assert only_problem(text).startswith(expected)


def test_duplicate_keys_are_reported_together() -> None:
    text = edit(
        "cpus: 1", "cpus: 1\ncpus: 2", edit("      user_name: key", "      user_name: key\n      user_name: k2")
    )
    assert problems(text) == [
        "manifest.yml:5: cpus: duplicate key",
        "manifest.yml:19: data_stores[0].connection.user_name: duplicate key",
    ]


def test_several_problems_are_reported_together_in_line_order() -> None:
    text = edit("cpus: 1", "cpus: 0", edit("learners: 1", "learners: 0", edit("memory: 1Gb", "memory: 12 parsecs")))
    text = edit("  command: python train.py", "  command: ''", text)
    found = problems(text)
    assert [line.split(": ")[1] for line in found] == ["cpus", "memory", "learners", "framework.command"]


def test_missing_sections_are_each_named() -> None:
    found = problems("name: x\ncpus: 1\nmemory: 1GB\n")
    assert found == [
        "manifest.yml:1: data_stores: required: a list of data stores (id, type, training_data, training_results,"
        " connection)",
        "manifest.yml:1: framework: required: name, version and command of the framework",
    ]


def test_duplicate_data_store_ids_and_missing_training_data() -> None:
    second = "  - id: store\n    type: mount_volume\n    connection:\n      path: /data\n"
    found = problems(edit("framework:\n", second + "framework:\n"))
    assert found == ["manifest.yml:19: data_stores[1].id: duplicate data store id 'store' (first at data_stores[0])"]
    no_data = edit("    training_data:\n      container: data\n", "")
    assert only_problem(no_data) == (
        "manifest.yml:8: data_stores: no data store has training_data: name the container the training data is in"
    )


@pytest.mark.parametrize("container", ["data/../other-tenant", "..", "data/./x", "results/.."])
def test_dot_segments_in_a_bucket_path_are_refused(container: str) -> None:
    found = only_problem(edit("      container: data\n", f"      container: {container}\n"))
    assert found == (
        f"manifest.yml:12: data_stores[0].training_data.container: {container!r}: '.' and '..' are not allowed"
        " in a bucket path"
    )


def test_a_manifest_with_too_many_values_is_refused_before_it_is_built() -> None:
    metrics = "evaluation_metrics:\n  x: [" + ",".join("1" for _ in range(20_000)) + "]\n"
    assert only_problem(BASE + metrics) == "manifest.yml: (document): more than 10000 values: too large or too complex"


def test_a_manifest_over_its_time_budget_is_refused() -> None:
    metrics = "evaluation_metrics:\n  x: [" + ",".join("1" for _ in range(5_000)) + "]\n"
    with pytest.raises(ManifestError, match=r"reading it took longer than 1e-06 s: too large or too complex"):
        parse_manifest(BASE + metrics, seconds=1e-6)


def test_referenced_data_store_ids_must_exist() -> None:
    text = BASE + "learnerkit:\n  training_data: nope\n  training_results: store\n"
    assert problems(text) == ["manifest.yml:24: learnerkit.training_data: no data store has id 'nope'; ids: store"]


def test_referenced_data_store_must_have_the_container() -> None:
    text = edit("    training_results:\n      container: results\n", "") + "learnerkit:\n  training_results: store\n"
    assert (
        only_problem(text)
        == "manifest.yml:22: learnerkit.training_results: data store 'store' has no training_results container"
    )


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("  priority: 5000", "learnerkit.priority: must be at most 1000; got 5000"),
        ("  tenant: Team_A", "learnerkit.tenant: 'Team_A' is not valid: lower-case letters"),
        ("  checkpoint_interval: 0", "learnerkit.checkpoint_interval: must be at least 1; got 0"),
        ("  max_restarts: -1", "learnerkit.max_restarts: must be at least 0; got -1"),
        ("  auto_resume: maybe", "learnerkit.auto_resume: expected true or false; got the string 'maybe'"),
        ("  distributed: horovod", "learnerkit.distributed: unknown value 'horovod'; valid: none, ddp, tf, mxnet"),
        ("  distributed: tf", "learnerkit.distributed: tf runs tensorflow learners; framework.name is 'pytorch'"),
        ("  halt_grace: 1.5", "learnerkit.halt_grace: expected a whole number; got the number 1.5"),
        ("  image: 'a b'", "learnerkit.image: 'a b' is not valid: an image reference without spaces"),
        ("  sparkle: true", "learnerkit.sparkle: unknown key 'sparkle'; valid keys: image, priority,"),
    ],
)
def test_extension_errors(section: str, expected: str) -> None:
    assert only_problem(BASE + "learnerkit:\n" + section + "\n").startswith(f"manifest.yml:24: {expected}")


def test_image_override_skips_the_version_check() -> None:
    text = edit('  version: "2.13"', '  version: "0.4"') + "learnerkit:\n  image: registry.local/mine:1\n"
    job = parse_manifest(text, catalog=CATALOG)
    assert job.image == "registry.local/mine:1"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "    type: s3_datastore",
            "    type: mount_volume",
            "manifest.yml:16: data_stores[0].connection.auth_url: unknown",
        ),
        (
            "      password: secret",
            "      password: secret\n      type: mount_cos",
            "connection.type: 'mount_cos' contra",
        ),
    ],
)
def test_connection_keys_follow_the_store_type(old: str, new: str, expected: str) -> None:
    found = problems(edit(old, new))
    assert any(expected in line for line in found), found


def test_host_mount_path_must_be_absolute() -> None:
    store = "    type: mount_volume\n    training_data:\n      container: d\n    connection:\n      path: data\n"
    text = BASE.split("  - id: store\n")[0] + "  - id: store\n" + store + BASE.split("password: secret\n")[1]
    assert only_problem(text) == "manifest.yml:14: data_stores[0].connection.path: 'data' must be an absolute host path"


def test_evaluation_metrics_must_be_json_data() -> None:
    assert only_problem(BASE + "evaluation_metrics: tensorboard\n") == (
        "manifest.yml:23: evaluation_metrics: expected a mapping (type, in, groups, ...); got the string 'tensorboard'"
    )
    dated = BASE + "evaluation_metrics:\n  type: regex_extractor\n  since: 2024-01-05\n"
    assert only_problem(dated).startswith("manifest.yml:25: evaluation_metrics.since: a date (2024-01-05) has no JSON")


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            "  type: tensorboard\n  in: $HOME/tb\n",
            "manifest.yml:25: evaluation_metrics.in: unknown variable $HOME in '$HOME/tb'; known: $DATA_DIR, "
            "$MODEL_DIR, $RESULT_DIR, $CHECKPOINT_DIR, $LOG_DIR, $JOB_STATE_DIR",
        ),
        (
            "  type: tensorboard\n  in: /etc\n",
            "manifest.yml:25: evaluation_metrics.in: '/etc' is outside the job folder /job",
        ),
        ("  type: logstash\n", "manifest.yml:24: evaluation_metrics.type: must be one of"),
        (
            "  type: regex_extractor\n",
            "manifest.yml:23: evaluation_metrics.groups: a regex_extractor needs at least one group",
        ),
    ],
)
def test_the_sidecars_checks_of_evaluation_metrics_run_at_validate(section: str, expected: str) -> None:
    assert only_problem(BASE + "evaluation_metrics:\n" + section).startswith(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x [*x]\n", "manifest.yml:1: a[0]: recursive alias"),
        ("when: 2024-02-30\n", "manifest.yml:1: when: cannot read value '2024-02-30'"),
        ("1: x\n", "manifest.yml:1: (document): key 1 must be a string"),
        ("? [a]\n: x\n", "manifest.yml:1: (document): key a collection must be a string"),
        ("a: !!python/object:os.system x\n", "manifest.yml:1: a: cannot read value: could not determine a constructor"),
    ],
)
def test_yaml_oddities_are_problems_not_crashes(text: str, expected: str) -> None:
    assert any(line.startswith(expected) for line in problems(text))


def test_unreadable_file_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.yml")
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_manifest(binary)


# --- the command -------------------------------------------------------------------------------------


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_validate_prints_a_summary() -> None:
    code, out = run("job", "validate", str(MANIFESTS / "learnerkit-pytorch-ddp.yml"), "--root", str(REPO))
    assert code == 0, out
    for text in ("resnet-ddp", "pytorch 2.13-cuda", "2 x 4 cpus, 2 gpus (nvidia-tesla-v100), 24GiB", "datasets"):
        assert text in out


def test_validate_json_holds_the_spec() -> None:
    code, out = run(
        "job", "validate", str(MANIFESTS / "ffdl-custom-pytorch-dist.yml"), "--root", str(REPO), "-o", "json"
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["valid"] is True
    assert data["manifest"]["framework"]["version"] == "tomcli/pytorch:latest"
    assert "password" not in data["manifest"]["data_stores"][0]["connection"]


def test_validate_reports_every_problem_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "manifest.yml"
    bad.write_text(edit("cpus: 1", "cpus: 0", edit("memory: 1Gb", "memory: much")))
    code, out = run("job", "validate", str(bad), "--root", str(REPO), "-o", "json")
    assert code == 1
    data = json.loads(out)
    assert data["valid"] is False
    assert [(p["line"], p["field"]) for p in data["problems"]] == [(4, "cpus"), (6, "memory")]
    code, out = run("job", "validate", str(bad), "--root", str(REPO))
    assert code == 1
    assert "2 problems" in out
    assert f"{bad}:4: cpus: must be more than 0; got 0" in out
