"""The build tool's tables at 80 columns: specs and references whole, reasons after the table, nothing cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from learnerkit.cli import cli
from learnerkit_build import views
from learnerkit_build.builds.images import BuildResult
from learnerkit_build.publish.records import PublishRecord, record_publish
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import Setting
from learnerkit_build.scan import outdated
from learnerkit_build.scan.outdated import OutdatedImage
from learnerkit_build.views import build_table, image_rows, image_table, settings_table, simple_table
from tests.unit.conftest import REPO

CUDA = {
    "version": "13.0",
    "cudnn": None,
    "capabilities": ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "compute_75"],
    "note": "built without cuDNN: the reason, in words",
}
ROWS = [
    {
        "spec": f"tensorflow:2.21-{variant}",
        "reference": f"learnerkit/tensorflow:2.21-{variant}-py3.12",
        "accelerator": variant,
        "python": "3.12",
        "base": f"registry.example/very/long/base-image-name:{variant}-2026.11",
        "cuda": CUDA if variant == "cuda" else None,
        "built": variant == "cpu",
    }
    for variant in ("cpu", "cuda")
]


BASE = "learnerkit/base:debian-bookworm-6a8f819011bc"


def at_80(renderable: object) -> str:
    console = Console(width=80, record=True, force_terminal=False)
    console.print(renderable)
    return console.export_text()


def test_image_list_keeps_specs_references_and_bases_whole_at_80_columns() -> None:
    text = at_80(image_table(ROWS))
    for row in ROWS:
        assert row["spec"] in text and row["reference"] in text and row["base"] in text
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_image_list_shows_each_cuda_build_with_cudnn_capabilities_and_note() -> None:
    text = at_80(image_table(ROWS))
    cuda_table = text[text.index("CUDA builds") :]
    assert "tensorflow:2.21-cuda" in cuda_table and "tensorflow:2.21-cpu" not in cuda_table
    assert "13.0" in cuda_table and "none" in cuda_table
    assert all(capability in cuda_table for capability in CUDA["capabilities"])
    assert "tensorflow:2.21-cuda: built without cuDNN: the reason, in words" in " ".join(text.split())


def test_the_real_matrix_lists_every_cuda_variant_within_80_columns() -> None:
    rows = image_rows(load_matrix(REPO).images)
    text = at_80(image_table(rows))
    assert max(len(line) for line in text.splitlines()) <= 80
    for row in rows:
        assert row["spec"] in text and row["reference"] in text
        if row["cuda"]:
            assert row["cuda"]["version"] in text[text.index("CUDA builds") :]


def test_build_inputs_say_their_source_and_why_one_is_not_used() -> None:
    settings = [
        Setting("index-url", "https://pypi.org/simple", "default"),
        Setting("extra-index-url", "file:///opt/pypi-more/simple", "pip config global.extra-index-url", "a folder"),
        Setting("find-links", "/opt/wheels", "pip config $PIP_FIND_LINKS"),
        Setting("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "pip config $PIP_CERT"),
    ]
    drawn = at_80(settings_table(settings))
    words = drawn.split()
    for word in ["file:///opt/pypi-more/simple", "global.extra-index-url", "/etc/ssl/certs/ca-certificates.crt"]:
        assert word in words, drawn
    assert "(not used)" in drawn.split("/opt/pypi-more/simple")[1].split("/opt/wheels")[0], drawn
    assert "file:///opt/pypi-more/simple: not used: a folder" in " ".join(words)


def test_build_results_keep_references_whole_and_say_every_reason() -> None:
    results = [
        BuildResult("tensorflow:2.21-cpu", "cached", "learnerkit/tensorflow:2.21-cpu-py3.12", seconds=0.2),
        BuildResult(
            "tensorflow:2.21-cuda",
            "skipped",
            "learnerkit/tensorflow:2.21-cuda-py3.12",
            reason="base image registry.example/cuda-base:12.9 is not on this engine",
        ),
    ]
    text = at_80(build_table(results))
    assert "learnerkit/tensorflow:2.21-cuda-py3.12" in text and "skipped" in text
    assert "registry.example/cuda-base:12.9" in " ".join(text.split())
    assert "…" not in text


def test_the_real_matrix_lists_each_version_of_a_framework_on_rows_of_its_own() -> None:
    rows = image_rows(load_matrix(REPO).images)
    text = at_80(image_table(rows))
    jax = [line.split()[0] for line in text.splitlines() if line.strip().startswith("jax:")]
    assert jax[:4] == ["jax:0.10-cpu", "jax:0.10-cuda", "jax:0.9-cpu", "jax:0.9-cuda"]  # listed newest first
    assert "learnerkit/jax:0.9-cuda-py3.11" in text and "learnerkit/jax:0.10-cuda-py3.11" in text


def test_outdated_keeps_specs_ids_and_references_in_reasons_whole_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two versions of one framework, both built, one of them on an older base: every row whole, reasons
    folded but never cut (`--output json` holds the full IDs)."""
    reasons = ["security update libc6 2.36-9+deb12u10 -> 2.36-9+deb12u13", f"a newer base {BASE} (sha256:0123) exists"]
    found = [
        OutdatedImage(
            f"jax:{version}-{variant}",
            f"learnerkit/jax:{version}-{variant}-py3.11",
            "sha256:" + digit * 64,
            reasons if version == "0.9" else [],
        )
        for version, digit in (("0.10", "a"), ("0.9", "b"))
        for variant in ("cpu", "cuda")
    ]
    monkeypatch.setattr(outdated, "outdated_images", lambda images: found)
    result = CliRunner().invoke(cli, ["image", "outdated", "jax", "--root", str(REPO)], env={"COLUMNS": "80"})
    assert result.exit_code == 1  # some are outdated
    assert "…" not in result.output and max(len(line) for line in result.output.splitlines()) <= 80
    for image in found:
        assert f"{image.spec} " in result.output and image.image_id[7:19] in result.output
    assert BASE in result.output and "2.36-9+deb12u10 -> 2.36-9+deb12u13" in " ".join(result.output.split())
    listed = CliRunner().invoke(cli, ["image", "outdated", "jax", "--root", str(REPO), "-o", "json"])
    assert [(item["spec"], item["image_id"]) for item in json.loads(listed.output)] == [
        (image.spec, image.image_id) for image in found
    ]


def test_lock_prune_and_base_tables_keep_what_a_user_copies_whole_at_80_columns() -> None:
    locks = [
        {
            "name": "tensorflow:2.21-cuda",
            "path": "frameworks/tensorflow/lock/2.21-cuda.json",
            "debian": 119,
            "python": 50,
            "status": "written",
        }
    ]
    pruned = [{"tag": "learnerkit/tensorflow:2.21-cuda-py3.11-0123456789ab", "status": "removed"}]
    bases = [{"base": "debian-bookworm", "image_id": "sha256:" + "ab" * 32, "status": "cached"}]
    for rows, whole in ((locks, ("name", "path")), (pruned, ("tag",)), (bases, ("image_id",))):
        text = at_80(simple_table(rows, *whole))
        for key in whole:
            assert str(rows[0][key]) in text, f"{key} cut in\n{text}"
        assert "…" not in text


def test_image_list_shows_each_publish_with_its_digest_whole_at_80_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Published, rebuilt since and not published, from this host's publish records; the pushed reference and
    the digest each on a line of its own, never cut at 80 columns; `--output json` has the record."""
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path))
    images = load_matrix(REPO).images
    first, second = (f"{image.repository()}:{image.tag}" for image in images[:2])
    old, new, digest, key = "sha256:" + "1" * 64, "sha256:" + "2" * 64, "sha256:" + "d" * 64, "e" * 64
    engine = {first: old, second: new}
    monkeypatch.setattr(views.engineimages, "ping", lambda: None)
    monkeypatch.setattr(views.engineimages, "image_id", engine.get)
    monkeypatch.setattr(views.engineimages, "image_labels", lambda reference: {})
    pushed = "registry.example:5000/"
    for image_id, reference in ((old, first), (old.replace("1", "3"), second)):
        record = PublishRecord(
            image_id, reference, pushed + reference, digest, "2026-11-29T05:10:00+00:00", "tag-schema", "s", key, ()
        )
        record_publish(record)
    text = at_80(image_table(image_rows(images)))
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    lines = [line.strip() for line in text.splitlines()]
    assert f"{images[0].name}: published 2026-11-29T05:10:00+00:00" in lines
    assert f"{images[1].name}: published, but the image was rebuilt since" in lines
    assert lines.count(pushed + first) == 1 and lines.count(f"@{digest}") == 2 and lines.count(f"key {key}") == 2
    assert f"not published: {len(images) - 2} of {len(images)} images" in lines
    listed = CliRunner().invoke(cli, ["image", "ls", "--root", str(REPO), "-o", "json"])
    rows = {row["spec"]: row["publish"] for row in json.loads(listed.output)}
    assert rows[images[0].name]["state"] == "published"
    assert rows[images[0].name]["pinned"] == f"{pushed}{first}@{digest}"
    assert rows[images[0].name]["record"]["image_id"] == old
    assert rows[images[1].name]["state"] == "rebuilt since"
    assert rows[images[2].name] == {"state": "not published", "record": None, "pinned": None}
