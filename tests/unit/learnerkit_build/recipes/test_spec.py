"""framework.yaml parsing: valid files load; every kind of bad input names file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit_build.errors import SpecError
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.spec import load_framework
from tests.unit.conftest import VALID_YAML, MakeProject

REPO = Path(__file__).resolve().parents[4]


def error_for(make_project: MakeProject, yaml_text: str) -> str:
    root = make_project(yaml_text)
    with pytest.raises(SpecError) as caught:
        load_framework(root / "frameworks" / "toy")
    return str(caught.value)


def test_valid_framework_loads_with_versions_and_variants(make_project: MakeProject) -> None:
    spec = load_framework(make_project() / "frameworks" / "toy")
    assert list(spec.versions) == ["1.0"]
    variants = spec.versions["1.0"].variants
    assert variants["cpu"].apt == ["libgomp1"]
    assert variants["cuda"].python == "3.12"
    assert spec.smoke.steps == 60


def test_unknown_key_names_line_field_and_valid_keys(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace("        apt: [libgomp1]\n", "        colour: red\n"))
    assert "framework.yaml:12:" in message
    assert 'versions["1.0"].variants.cpu.colour' in message
    assert "unknown key 'colour'" in message
    assert "accelerator, base, python, apt, pip, builder, args, cuda" in message


def test_bad_enum_value_names_field_and_choices(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace("accelerator: cpu", "accelerator: tpu"))
    assert "framework.yaml:11:" in message
    assert "variants.cpu.accelerator" in message
    assert "'cpu' or 'cuda'" in message


def test_unquoted_version_key_is_refused_before_it_turns_into_a_number(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace('"1.0":', "2.10:"))
    assert "framework.yaml:7:" in message
    assert "quote it" in message


def test_duplicate_key_names_its_line(make_project: MakeProject) -> None:
    message = error_for(
        make_project, VALID_YAML.replace("description: a toy framework\n", "description: a\ndescription: b\n")
    )
    assert "framework.yaml:3: description: duplicate key" in message


def test_yaml_syntax_error_names_line(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML + "  bad: [unclosed\n")
    assert "YAML syntax error" in message
    assert "framework.yaml:" in message


def test_invalid_requirement_is_named(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace('["six==1.17.0"]', '["six=>>1"]', 1))
    assert "variants.cpu.pip.packages" in message
    assert "'six=>>1' is not a valid requirement" in message


def test_name_must_match_folder(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace("name: toy", "name: other"))
    assert "must equal its folder name 'toy'" in message


def test_missing_required_field_is_named(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace("        accelerator: cpu\n", "", 1))
    assert "variants.cpu.accelerator: Field required" in message


def test_the_projects_own_matrix_is_valid_and_every_framework_has_cpu_and_cuda() -> None:
    """Training frameworks come as cpu and cuda; the evaluator images (docs/evaluations.md) and the model server
    as cpu."""
    matrix = load_matrix(REPO)
    assert {"caffe", "jax", "mxnet", "pytorch", "tensorflow"} <= set(matrix.frameworks)
    assert {"robustness", "fairness", "modelserver"} <= set(matrix.frameworks)
    assert not {"robustness", "fairness", "modelserver"} & {i.framework.name for i in matrix.training_images}
    for framework in matrix.frameworks:
        images = [image for image in matrix.images if image.framework.name == framework]
        variants = {image.variant.accelerator for image in images}
        evaluator = images[0].framework.smoke.kind != "training"
        assert variants == ({"cpu"} if evaluator else {"cpu", "cuda"}), framework


def test_every_package_must_be_pinned_to_one_version(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace('["six==1.17.0"]', '["six>=1.16"]', 1))
    assert "variants.cpu.pip.packages" in message and "'six>=1.16' is not pinned" in message
    load_framework(make_project(VALID_YAML.replace('["six==1.17.0"]', '["six===1.17.0"]', 1)) / "frameworks" / "toy")


def test_a_builders_sources_and_wheels_are_pinned_and_its_packages_are_debian_names(make_project: MakeProject) -> None:
    """A lock holds what the builder stage installs: its pins must name one version each, as pip.packages do."""
    builder = "".join(
        f"{line}\n"
        for line in (
            "        builder:",
            "          apt: [cmake]",
            '          sources: ["toy-src==1.0"]',
            '          wheels: ["nvcc==13.0"]',
        )
    )
    valid = VALID_YAML.replace("        pip:\n", builder + "        pip:\n", 1)
    variant = load_framework(make_project(valid) / "frameworks" / "toy").versions["1.0"].variants["cpu"]
    assert variant.builder is not None and variant.builder.sources == ["toy-src==1.0"]
    message = error_for(make_project, valid.replace('"toy-src==1.0"', '"toy-src>=1"'))
    assert "variants.cpu.builder.sources" in message and "'toy-src>=1' is not pinned" in message
    message = error_for(make_project, valid.replace("[cmake]", "[CMake]"))
    assert "variants.cpu.builder.apt[0]: String should match pattern" in message
    message = error_for(make_project, valid.replace("          wheels:", "          wheel:"))
    assert "unknown key 'wheel'; valid keys: apt, sources, wheels" in message


@pytest.mark.parametrize("package", ["nvidia-cublas-cu12==12.9.3.13", "jax[cuda12]==0.10.2", "triton==3.7.1"])
def test_a_cpu_variant_cannot_ask_for_cuda(make_project: MakeProject, package: str) -> None:
    message = error_for(make_project, VALID_YAML.replace('["six==1.17.0"]', f'["{package}"]', 1))
    assert f"a cpu variant must not install CUDA: {package}" in message


def test_a_cuda_variant_says_what_it_was_built_with(make_project: MakeProject) -> None:
    start = VALID_YAML.index("        cuda:\n          version")
    without = VALID_YAML[:start]
    message = error_for(make_project, without)
    assert "a cuda variant needs a `cuda:` section" in message
    message = error_for(make_project, VALID_YAML.replace("          note: no cuDNN in a toy\n", ""))
    assert "cudnn is null: say in `note` why" in message
    message = error_for(make_project, VALID_YAML.replace("[sm_80, compute_80]", "[ampere]"))
    assert "variants.cuda.cuda.capabilities[0]: String should match pattern" in message


def test_cuda_variants_need_a_probe(make_project: MakeProject) -> None:
    message = error_for(make_project, VALID_YAML.replace('  probe: ["python", "/opt/learner/smoke/probe.py"]\n', ""))
    assert "cuda variants (1.0-cuda) need smoke.probe" in message


def test_the_evaluator_images_share_their_torch_layer() -> None:
    """Every evaluator image installs the same `pip.shared` first: one layer for them all."""
    images = [image for image in load_matrix(REPO).images if image.framework.smoke.kind == "evaluation"]
    assert {"robustness", "fairness"} <= {image.framework.name for image in images}
    shared = {tuple(image.variant.pip.shared) for image in images if image.variant.pip}
    assert shared == {("torch==2.13.0+cpu", "numpy==2.4.6")}


def test_a_shared_requirement_must_be_one_of_the_packages(make_project: MakeProject) -> None:
    yaml_text = VALID_YAML.replace(
        '          packages: ["six==1.17.0"]\n',
        '          packages: ["six==1.17.0"]\n          shared: ["six==1.16.0"]\n',
        1,
    )
    message = error_for(make_project, yaml_text)
    assert (
        "variants.cpu.pip: Value error, shared requirements must be listed in packages too, exactly: six==1.16.0"
        in message
    )
