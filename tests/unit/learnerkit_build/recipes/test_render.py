"""Rendering: every image of the real matrix renders hardened; template errors name template and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit_build.builds.images import base_ref_for, render_image
from learnerkit_build.errors import SpecError, TemplateError
from learnerkit_build.lock.committed import image_lock_path
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import TEMPLATE_CACHE, BuildInputs, make_environment
from learnerkit_build.scan.lint import lint_dockerfile
from tests.unit.conftest import MakeProject

REPO = Path(__file__).resolve().parents[4]
MATRIX = load_matrix(REPO)


@pytest.mark.parametrize("image", MATRIX.images, ids=lambda image: image.name)
def test_every_image_renders_hardened_and_passes_hadolint(image) -> None:  # type: ignore[no-untyped-def]
    text = render_image(REPO, image, BuildInputs(ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt")))
    final_stage = text[text.rindex("\nFROM ") :]
    assert final_stage.startswith(f"\nFROM {base_ref_for(image)} AS learner")
    assert "\nUSER 1000:0\n" in final_stage
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/learner-run"]' in final_stage
    assert "find / -xdev -perm /6000 -type f -exec chmod a-s" in final_stage
    # Build secrets reach RUN steps only as BuildKit mounts, never through COPY, ADD, ENV or ARG.
    assert "ca-certificates.crt" not in text
    # A locked image reads no index at all: its wheels come from the lock's files, mounted.
    locked = image_lock_path(image).exists()
    assert "--mount=type=secret,id=pip_conf" in text or locked or image.variant.pip is None
    report = lint_dockerfile(image.name, text, REPO / ".hadolint.yaml")
    assert report.passed, report.findings


def test_local_base_must_provide_the_declared_python(make_project: MakeProject) -> None:
    root = make_project()
    image = load_matrix(root).select(["toy:1.0-cpu"])[0]
    wrong = image.model_copy(update={"python": "3.12"})
    with pytest.raises(SpecError, match=r"provides Python 3\.11, not 3\.12"):
        render_image(root, wrong, BuildInputs())


def test_template_syntax_error_names_template_line_and_image(make_project: MakeProject) -> None:
    root = make_project(template='{% extends "learner_base/Dockerfile.j2" %}\n{% block framework_files %}\n{% if %}\n')
    image = load_matrix(root).select(["toy:1.0-cpu"])[0]
    with pytest.raises(TemplateError, match=r"frameworks/toy/Dockerfile.j2:3: .*\(rendering toy:1.0-cpu\)"):
        render_image(root, image, BuildInputs())


def test_undefined_variable_names_template_and_line(make_project: MakeProject) -> None:
    template = (
        '{% extends "learner_base/Dockerfile.j2" %}\n{% block framework_files %}\n'
        "RUN echo {{ image.variant.args.nope }}\n{% endblock %}\n"
    )
    root = make_project(template=template)
    image = load_matrix(root).select(["toy:1.0-cpu"])[0]
    with pytest.raises(TemplateError, match=r"Dockerfile.j2:3: .*nope"):
        render_image(root, image, BuildInputs())


def test_template_must_extend_the_base(make_project: MakeProject) -> None:
    root = make_project(template="FROM debian\nRUN echo copied\n")
    image = load_matrix(root).select(["toy:1.0-cpu"])[0]
    with pytest.raises(TemplateError, match=r'must start with \{% extends "learner_base/Dockerfile.j2" %\}'):
        render_image(root, image, BuildInputs())


def test_missing_template_is_named(make_project: MakeProject) -> None:
    root = make_project()
    (root / "frameworks" / "toy" / "Dockerfile.j2").unlink()
    image = load_matrix(root).select(["toy:1.0-cpu"])[0]
    with pytest.raises(TemplateError, match=r"template frameworks/toy/Dockerfile.j2 not found"):
        render_image(root, image, BuildInputs())


def test_pip_install_carries_index_overrides_and_quotes_requirements(make_project: MakeProject) -> None:
    root = make_project()
    image = load_matrix(root).select(["toy:1.0-cpu"])[0]
    pip = image.variant.pip.model_copy(  # type: ignore[union-attr]
        update={"packages": ["six>=1,<2"], "index_url": "https://idx.example/simple"}
    )
    image = image.model_copy(update={"variant": image.variant.model_copy(update={"pip": pip})})
    text = render_image(root, image, BuildInputs())
    assert "--index-url https://idx.example/simple 'six>=1,<2'" in text


@pytest.mark.parametrize("image", MATRIX.images, ids=lambda image: image.name)
def test_every_variant_builds_on_the_debian_base_and_keeps_its_accelerator(image) -> None:  # type: ignore[no-untyped-def]
    text = render_image(REPO, image, BuildInputs())
    assert image.local_base == "debian-bookworm"
    assert "nvidia/cuda" not in text and "download.pytorch.org" not in text
    if image.variant.accelerator == "cuda":
        assert "/etc/ld.so.conf.d/learnerkit-cuda-wheels.conf" in text
        assert f'io.learnerkit.cuda="{image.variant.cuda.version}"' in text
        assert "a cpu variant holds CUDA distributions" not in text
    else:
        assert "a cpu variant holds CUDA distributions" in text and "ld.so.conf.d" not in text


def test_compiled_templates_are_kept_in_the_project_and_an_edited_template_is_compiled_again(tmp_path: Path) -> None:
    template = tmp_path / "t.j2"
    template.write_text("FROM {{ base }}\n", encoding="utf-8")
    assert make_environment(tmp_path).get_template("t.j2").render(base="a") == "FROM a\n"
    kept = list((tmp_path / TEMPLATE_CACHE).iterdir())
    assert kept
    assert make_environment(tmp_path).get_template("t.j2").render(base="b") == "FROM b\n"
    template.write_text("FROM {{ base }} AS learner\n", encoding="utf-8")
    assert make_environment(tmp_path).get_template("t.j2").render(base="c") == "FROM c AS learner\n"
