"""The Images view's data from the build tool's records (written here as `image scan` and `image test` write
them, under a temporary LEARNERKIT_HOME) and an engine faked at its boundary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerkit.scheduler.console import images_views
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.state import id_file_name

REPO = Path(__file__).resolve().parents[4]
IMAGE_ID = "sha256:" + "ab" * 32
REPORT = {
    "checks": [
        {"id": "config.root-user", "severity": "high", "status": "PASS", "title": "non-root", "evidence": []},
        {"id": "vuln.osv", "severity": "low", "status": "WARN", "title": "a low CVE", "evidence": [{"message": "x"}]},
        {"id": "secrets", "severity": "critical", "status": "FAIL", "title": "a key", "evidence": ["/etc/k"]},
    ],
    "counts": {"PASS": 1, "WARN": 1, "FAIL": 1},
    "gate": {"blockers": ["secrets"], "passed": False},
    "passed": False,
    "scanned_at": "2026-11-29T01:55:40+00:00",
    "sbom_components": 152,
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path))
    folder = tmp_path / "image-scans" / id_file_name(IMAGE_ID)
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps(REPORT))
    (folder / "sbom.cdx.json").write_text("{}")
    record = {"image_id": IMAGE_ID, "passed": False, "sha256": {"report.json": "", "sbom.cdx.json": ""}}
    (tmp_path / "image-scans" / f"{id_file_name(IMAGE_ID)}.json").write_text(json.dumps(record))
    (tmp_path / "image-tests").mkdir()
    tests = {"passed": True, "checks": [{"name": "non-root", "status": "pass", "detail": "uid 1000"}]}
    (tmp_path / "image-tests" / f"{id_file_name(IMAGE_ID)}.json").write_text(json.dumps(tests))
    return tmp_path


def test_a_built_scanned_tested_image_shows_its_records(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = load_matrix(REPO).images[0]
    monkeypatch.setattr(images_views.engineimages, "image_id", lambda _ref: IMAGE_ID)
    monkeypatch.setattr(images_views, "base_reasons", lambda _ref: ["base learnerkit/base is now sha256:1"])
    view = images_views.image_view(image)
    assert (view.spec, view.image_id, view.verdict) == (image.name, IMAGE_ID, "failed")
    assert view.scan is not None and view.scan.blockers == ("secrets",) and view.scan.components == 152
    assert [(f.check, f.status) for f in view.scan.findings] == [("secrets", "FAIL"), ("vuln.osv", "WARN")]
    assert view.scan.findings[1].evidence == ("x",)
    assert view.tests is not None and view.tests.checks == (("non-root", "pass", "uid 1000"),)
    assert view.outdated == ("base learnerkit/base is now sha256:1",)
    assert view.documents == ("report", "sbom")  # no SARIF recorded
    assert images_views.record_file(IMAGE_ID, "sbom") == home / "image-scans" / id_file_name(IMAGE_ID) / "sbom.cdx.json"
    assert images_views.record_file(IMAGE_ID, "sarif") is None
    assert images_views.record_file(IMAGE_ID, "../../etc/passwd") is None


def test_an_image_not_built_or_never_scanned(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = load_matrix(REPO).images[0]
    monkeypatch.setattr(images_views.engineimages, "image_id", lambda _ref: None)
    assert images_views.image_view(image).verdict == "not built"
    monkeypatch.setattr(images_views.engineimages, "image_id", lambda _ref: "sha256:" + "cd" * 32)
    monkeypatch.setattr(images_views, "base_reasons", lambda _ref: [])
    view = images_views.image_view(image)
    assert (view.verdict, view.scan, view.tests, view.documents) == ("not scanned", None, None, ())


def test_an_engine_that_does_not_answer_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_ref: str) -> str:
        raise images_views.engineimages.EngineError("no engine at /var/run/docker.sock")

    monkeypatch.setattr(images_views.engineimages, "image_id", refuse)
    view = images_views.image_view(load_matrix(REPO).images[0])
    assert view.image_id is None and "no engine" in view.engine_problem


def test_the_matrix_is_every_framework_version_and_variant_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images_views.engineimages, "image_id", lambda _ref: None)
    matrix = load_matrix(REPO)
    views = images_views.image_views(matrix.images)
    assert sorted(v.spec for v in views) == sorted(i.name for i in matrix.images)
    keys = [(v.framework, v.version, v.variant) for v in views]
    assert keys == sorted(keys)
