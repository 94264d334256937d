"""FfDL manifests load unchanged; every bad manifest is refused naming `file:line: field.path`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.cli_job import framework_catalog
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.manifest.model import DistributedMode, FrameworkCatalog, JobManifest, ResourceDefaults
from learnerkit.scheduler.manifest.parser import load_manifest, parse_manifest
from learnerkit.scheduler.manifest.units import UNITS, format_size, parse_size

REPO = Path(__file__).resolve().parents[4]
MANIFESTS = Path(__file__).parents[1] / "manifests"
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


def problems(text: str, catalog: FrameworkCatalog = CATALOG) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, catalog=catalog)
    lines = [str(p) for p in caught.value.problems]
    assert str(caught.value) == "\n".join(lines)
    return lines


def only_problem(text: str, catalog: FrameworkCatalog = CATALOG) -> str:
    found = problems(text, catalog)
    assert len(found) == 1, found
    return found[0]


# --- FfDL's own manifests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "memory", "mode", "learners", "gpus"),
    [
        ("ffdl-tf-mount-cos.yml", 10**9, "copy", 1, 0),
        ("ffdl-tf-s3-copy.yml", 1000 * 2**20, "copy", 1, 0),
        ("ffdl-caffe-gpu.yml", 1000 * 2**20, "copy", 1, 1),
        ("ffdl-custom-pytorch-dist.yml", 16 * 10**9, "copy", 2, 1),
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
    # YAML keeps the line breaks before more-indented lines; FfDL's trainer replaced each with a space.
    assert "\n" not in job.framework.command
    assert job.framework.command.startswith("python3 convolutional_network.py   --trainImagesFile ${DATA_DIR}/")
    assert job.evaluation_metrics == {"type": "tensorboard", "in": "$JOB_STATE_DIR/logs/tb"}
    assert job.description == "Convolutional network model using tensorflow"
    assert job.version == "1.0"


def test_custom_framework_takes_its_image_from_the_version() -> None:
    job = load_manifest(MANIFESTS / "ffdl-custom-pytorch-dist.yml", CATALOG)
    assert job.name == "pytorch ddl"
    assert job.image == "tomcli/pytorch:latest"
    assert job.framework.command.startswith("./setup.sh; . env_file;")


def test_host_mount_has_no_credentials_and_serves_training_data_only() -> None:
    text = (MANIFESTS / "ffdl-tf-hostmount.yml").read_text(encoding="utf-8")
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, "hostmount.yml", FFDL_CATALOG)
    assert [str(p) for p in caught.value.problems] == [
        "hostmount.yml:14: data_stores[0].training_results: a mount_volume store serves training data only; results,"
        " logs and checkpoints go to an object store: add an s3_datastore or mount_cos store with training_results"
        " (learnerkit.training_results names it)"
    ]
    results = "  - id: out\n    type: mount_cos\n    training_results: {container: out}\n    connection:\n"
    results += "      {auth_url: 'http://s3.local:8333', user_name: k, password: s}\n"
    text = text.replace("framework:\n", results + "\nframework:\n", 1)
    text = text.replace("    training_results:\n      container: local-dlaas-ci-trained-results-tf-training-data\n", "")
    job = parse_manifest(text, "hostmount.yml", FFDL_CATALOG)
    store = job.data_stores[0]
    assert dict(store.connection) == {"type": "host_mount", "name": "host-mount", "path": "/cosdata"}
    assert job.credentials() == {"out": {"user_name": "k", "password": "s"}}
    assert job.training_data_store.mode == "mount" and job.training_results_store is job.data_stores[1]


def test_horovod_runs_as_a_distributed_job_of_the_framework_its_command_uses() -> None:
    job = load_manifest(MANIFESTS / "ffdl-horovod.yml", framework_catalog(REPO))
    assert (job.framework.name, job.framework.target) == ("horovod", "tensorflow")
    assert job.extensions.distributed is DistributedMode.TF
    text = (MANIFESTS / "ffdl-horovod.yml").read_text(encoding="utf-8")
    torch = parse_manifest(text.replace("tensorflow_mnist.py", "pytorch_mnist.py"), "m.yml", framework_catalog(REPO))
    assert torch.framework.target == "pytorch" and torch.extensions.distributed is DistributedMode.DDP
    chosen = parse_manifest(text + "learnerkit:\n  distributed: none\n", "m.yml", framework_catalog(REPO))
    assert chosen.extensions.distributed is DistributedMode.NONE
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text.replace("tensorflow_mnist.py", "mnist.py"), "m.yml", framework_catalog(REPO))
    assert "m.yml:24: framework.name: horovod runs PyTorch or TensorFlow here, and neither" in str(caught.value)


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
        "defaulted": [],
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
            "manifest.yml:20: framework.name: no learnerkit image runs framework 'torch'; frameworks here: caffe2,",
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


@pytest.mark.parametrize("key", ["user_name", "password"])
def test_a_credential_of_the_wrong_type_is_named_but_never_shown(key: str) -> None:
    old = {"user_name": "      user_name: key", "password": "      password: secret"}[key]
    message = only_problem(edit(old, f"      {key}: 8675309"))
    assert message.startswith(
        f"manifest.yml:{18 if key == 'password' else 17}: data_stores[0].connection.{key}: expected"
    )
    assert "a number" in message and "quote it" in message
    assert "8675309" not in message


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


def test_validate_lists_each_evaluation_and_the_catalog_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    variables = {"S3_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    for name, value in variables.items():  # the example's ${...}
        monkeypatch.setenv(name, value)
    manifest = tmp_path / "manifest.yml"
    example = (REPO / "examples" / "digits-evaluated" / "manifest.yml").read_text(encoding="utf-8")
    manifest.write_text(example + "catalog:\n  name: digits\n  alias: production\n", encoding="utf-8")
    code, out = run("job", "validate", str(manifest), "--root", str(REPO))
    assert code == 0, out
    flat = " ".join(out.replace("│", " ").split())
    assert "evaluation digits-robustness (robustness): digits-eval.csv, labels in 'label'" in flat
    assert "catalog registers model digits once its evaluations pass, alias production moved to it" in flat


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


# --- FfDL's defaults, units, names and versions --------------------------------------------------------


def test_missing_cpus_and_memory_get_ffdl_defaults_and_say_so() -> None:
    job = parse_manifest(edit("cpus: 1\n", "", edit("memory: 1Gb\n", "")), catalog=CATALOG)
    assert (job.resources.cpus, job.resources.memory_bytes) == (5.0, 12 * 2**30)
    assert job.resources.defaulted == ("cpus", "memory")
    smaller = ResourceDefaults(cpus=0.5, memory_bytes=2**30)
    job = parse_manifest(edit("cpus: 1\n", ""), catalog=CATALOG, defaults=smaller)
    assert (job.resources.cpus, job.resources.memory_bytes, job.resources.defaulted) == (0.5, 10**9, ("cpus",))


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_every_memory_unit_is_exact_in_any_case(unit: str) -> None:
    for spelled in (unit, unit.upper(), unit.capitalize()):
        assert parse_size(f"3{spelled}") == 3 * UNITS[unit]
    assert parse_size(f"1.5{unit}") == 3 * UNITS[unit] // 2


def test_ffdl_units_keep_their_nominal_size_not_ffdls_lcm_rounding() -> None:
    # FfDL's LCM gave 1000MiB as 1048.58 "MB" x 2**20 bytes (1099515822); learnerkit gives 1000 x 2**20 exactly.
    assert parse_size("1000MiB") == 1048576000
    assert parse_size("1Gb") == 10**9 and parse_size("1GiB") == 2**30


@pytest.mark.parametrize(
    ("name", "version", "target"),
    [
        ("caffe2", "0.8.1", "pytorch"),
        ("pytorchmpi", "0925mpi", "pytorch"),
        ("tensorflow-gpu", "latest-gpu", "tensorflow"),
        ("pytorch", "latest", "pytorch"),
        ("tensorflow", "latest-py3", "tensorflow"),
        ("caffe", "gpu", "caffe"),
        ("caffe", "cpu", "caffe"),
    ],
)
def test_ffdl_framework_names_and_versions_map_onto_the_built_ones(name: str, version: str, target: str) -> None:
    text = edit('  name: pytorch\n  version: "2.13"', f'  name: {name}\n  version: "{version}"')
    job = parse_manifest(text, catalog=framework_catalog(REPO))
    assert (job.framework.name, job.framework.version, job.framework.target) == (name, version, target)


def test_unbuilt_framework_and_version_errors_name_the_way_out() -> None:
    h2o = only_problem(edit("  name: pytorch", "  name: h2o3"), catalog=framework_catalog(REPO))
    assert h2o.startswith("manifest.yml:20: framework.name: no learnerkit image runs framework 'h2o3'; frameworks")
    assert "caffe, caffe-gpu, caffe2, horovod, jax, mxnet, pytorch, pytorchmpi" in h2o and "--image REF" in h2o
    old = only_problem(edit('  version: "2.13"', '  version: "1.5.0-py3"'), catalog=framework_catalog(REPO))
    assert old == (
        "manifest.yml:21: framework.version: no pytorch image '1.5.0-py3' is built here; versions: 2.13, 2.13-cpu,"
        " 2.13-cpu-py3.11, 2.13-cuda, 2.13-cuda-py3.11, latest (or pass --image REF, or set learnerkit.image)"
    )
    with_image = edit(
        "framework:", "learnerkit:\n  image: registry.local/h2o:1\nframework:", edit("  name: pytorch", "  name: h2o3")
    )
    assert parse_manifest(with_image, catalog=framework_catalog(REPO)).image == "registry.local/h2o:1"


def test_latest_and_ffdl_versions_resolve_to_the_newest_built_image() -> None:
    catalog = ImageCatalog(REPO)
    for name, version in (("pytorch", "latest"), ("caffe2", "0.8.1"), ("pytorch", "gpu")):
        text = edit('  name: pytorch\n  version: "2.13"', f'  name: {name}\n  version: "{version}"')
        job = parse_manifest(text, catalog=catalog.frameworks())
        assert catalog.resolve(job) == "learnerkit/pytorch:2.13-cpu-py3.11"  # gpus: 0 picks the CPU variant


@pytest.mark.parametrize(
    ("version", "gpus", "image"),
    [
        ("latest", 0, "learnerkit/jax:0.10-cpu-py3.11"),  # 0.10 is newer than 0.9: numbers, not text
        ("gpu", 1, "learnerkit/jax:0.10-cuda-py3.11"),
        ("0.10", 0, "learnerkit/jax:0.10-cpu-py3.11"),
        ("0.9", 0, "learnerkit/jax:0.9-cpu-py3.11"),
        ("0.9", 1, "learnerkit/jax:0.9-cuda-py3.11"),
        ("0.9-cuda-py3.11", 1, "learnerkit/jax:0.9-cuda-py3.11"),
    ],
)
def test_a_framework_with_two_versions_runs_the_one_named_and_latest_is_the_newest(
    version: str, gpus: int, image: str
) -> None:
    catalog = ImageCatalog(REPO)
    assert {"0.9", "0.9-cpu", "0.9-cuda", "0.10", "0.10-cpu", "0.10-cuda"} <= catalog.frameworks()["jax"]
    text = edit('  name: pytorch\n  version: "2.13"', f'  name: jax\n  version: "{version}"')
    job = parse_manifest(edit("gpus: 0", f"gpus: {gpus}", text), catalog=catalog.frameworks())
    assert catalog.resolve(job) == image


def test_a_version_of_a_framework_that_is_not_built_lists_every_built_one() -> None:
    text = edit('  name: pytorch\n  version: "2.13"', '  name: jax\n  version: "0.8"')
    message = only_problem(text, catalog=framework_catalog(REPO))
    assert "no jax image '0.8' is built here; versions: 0.10, 0.10-cpu," in message
    assert "0.9, 0.9-cpu, 0.9-cpu-py3.11, 0.9-cuda, 0.9-cuda-py3.11, latest" in message


def test_mount_cos_is_an_s3_bucket_copied_in_and_out() -> None:
    job = parse_manifest(edit("    type: s3_datastore", "    type: mount_cos"), catalog=CATALOG)
    store = job.training_data_store
    assert (store.type, store.mode) == ("mount_cos", "copy")
    assert job.training_results_store is store


def test_validate_says_which_defaults_it_applied(tmp_path: Path) -> None:
    path = tmp_path / "manifest.yml"
    path.write_text(edit("cpus: 1\n", ""), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(cli, ["job", "validate", str(path), "--root", str(REPO), "--output", "json"], env={})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["defaults_applied"] == {"cpus": 5.0}
    env = {"LEARNERKIT_DEFAULT_CPUS": "0.5", "COLUMNS": "200"}
    text = runner.invoke(cli, ["job", "validate", str(path), "--root", str(REPO)], env=env)
    assert text.exit_code == 0, text.output
    assert "defaults" in text.output and "cpus 0.5 (LEARNERKIT_DEFAULT_CPUS): not in the manifest" in text.output


def test_validate_leaves_only_training_results_to_submit(tmp_path: Path) -> None:
    """The one intended difference: offline, a manifest without training_results is accepted with the check left
    to submit, which a scheduler without a default results store refuses (the same parser, its settings)."""
    text = edit("    training_results:\n      container: results\n", "")
    path = tmp_path / "manifest.yml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(
        cli,
        ["job", "validate", str(path), "--root", str(REPO), "--output", "json"],
        env={"LEARNERKIT_RESULTS_BUCKET": ""},
    )
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.output)["left_to_submit"]) == ["training_results"]
    with pytest.raises(ManifestError, match="no data store has training_results"):
        parse_manifest(text, catalog=CATALOG)


def test_validate_checks_the_tenants_file_as_submit_does(tmp_path: Path) -> None:
    """`learnerkit.preemptible: false` and the priority against the tenant's settings, naming each field; the
    tenant from --tenant, else the manifest's `learnerkit.tenant`."""
    path = tmp_path / "manifest.yml"
    path.write_text(BASE + "learnerkit: {tenant: team-b, preemptible: false, priority: 50}\n", encoding="utf-8")
    tenants = tmp_path / "tenants.yml"
    tenants.write_text("tenants:\n  team-a: {opt_out: true, priority: [-10, 100]}\n", encoding="utf-8")
    runner = CliRunner()
    args = ["job", "validate", str(path), "--root", str(REPO), "--output", "json"]
    refused = runner.invoke(cli, [*args, "--tenants", str(tenants)])
    assert refused.exit_code == 1, refused.output
    found = {p["field"]: p["message"] for p in json.loads(refused.output)["problems"]}
    assert found == {
        "learnerkit.priority": "tenant 'team-b' may use priorities -1000..0; got 50",
        "learnerkit.preemptible": "tenant 'team-b' may not opt out of preemption (the tenants file's opt_out); "
        "remove it",
    }
    other = runner.invoke(cli, [*args, "--tenant", "team-a"], env={"LEARNERKIT_TENANTS": str(tenants)})
    assert other.exit_code == 1, other.output
    assert {p["field"]: p["message"] for p in json.loads(other.output)["problems"]} == {
        "learnerkit.tenant": "'team-b' is not your tenant ('team-a')"
    }
    path.write_text(BASE + "learnerkit: {preemptible: false, priority: 50}\n", encoding="utf-8")
    allowed = runner.invoke(cli, [*args, "--tenant", "team-a"], env={"LEARNERKIT_TENANTS": str(tenants)})
    assert allowed.exit_code == 0, allowed.output
    offline = runner.invoke(cli, args, env={})
    assert offline.exit_code == 0, "without a tenants file there are no tenant settings to check against"
