"""The Images view's data and pages from the build tool's records (written here as `image scan`, `image test` and
`image publish` write them, under a temporary LEARNERKIT_HOME), an engine faked at its boundary, and the pages
over the fake facade (FastAPI's TestClient)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.console import images_views
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit_build.publish.records import PublishRecord, RecordedAttestation, record_publish
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.state import id_file_name
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade

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


REBUILT_ID = "sha256:" + "ef" * 32
DIGEST = "sha256:" + "0d" * 32


def published(image_id: str, reference: str) -> PublishRecord:
    return PublishRecord(
        image_id,
        reference,
        f"registry.example:5000/{reference}",
        DIGEST,
        "2026-11-29T05:10:00+00:00",
        "referrers-api",
        "sha256:" + "5a" * 32,
        "0a1b2c3d4e5f",
        (RecordedAttestation("provenance", "https://slsa.dev/provenance/v1", "sha256:" + "7e" * 32),),
    )


def test_the_publish_state_published_not_published_rebuilt_since(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = load_matrix(REPO).images[0]
    reference = f"{image.repository()}:{image.tag}"
    monkeypatch.setattr(images_views, "base_reasons", lambda _ref: [])
    engine_has = {"id": IMAGE_ID}
    monkeypatch.setattr(images_views.engineimages, "image_id", lambda _ref: engine_has["id"])
    assert images_views.image_view(image).publish == images_views.NOT_PUBLISHED
    record_publish(published(IMAGE_ID, reference))
    view = images_views.image_view(image)
    assert (view.publish.state, view.publish.record) == ("published", published(IMAGE_ID, reference))
    engine_has["id"] = REBUILT_ID
    view = images_views.image_view(image)
    assert view.publish.state == "rebuilt since" and view.publish.record == published(IMAGE_ID, reference)


@pytest.fixture
def browser(home: Path, monkeypatch: pytest.MonkeyPatch, tenants: Tenants) -> Iterator[TestClient]:
    """A tenant's session on the console; the first image of the matrix built as IMAGE_ID, the others not built."""
    first = load_matrix(REPO).images[0]
    ids = {f"{first.repository()}:{first.tag}": IMAGE_ID}
    monkeypatch.setattr(images_views.engineimages, "image_id", ids.get)
    monkeypatch.setattr(images_views, "base_reasons", lambda _ref: [])
    monkeypatch.setattr(images_views, "statements_of", lambda _view: {})
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    with TestClient(create_app(FakeFacade(), tenants.path, console=settings)) as client:
        form = client.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        client.post("/ui/login", data={"csrf": csrf.group(1), "token": tenants.a})
        yield client


def row_of(page: str, spec: str) -> str:
    found = re.search(rf'<tr data-spec="{re.escape(spec)}">(.*?)</tr>', page, re.S)
    assert found is not None, spec
    return found.group(1)


def test_the_images_page_and_an_images_page_show_its_publish_whole(
    browser: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_matrix(REPO).images[0]
    reference = f"{first.repository()}:{first.tag}"
    row = row_of(browser.get("/ui/images").text, first.name)
    assert 'data-publish="not published">not published</td>' in row
    record_publish(published(IMAGE_ID, reference))
    pinned = f"registry.example:5000/{reference}@{DIGEST}"
    row = row_of(browser.get("/ui/images").text, first.name)
    assert f'<span class="id">{pinned}</span>, 2026-11-29T05:10:00+00:00' in row
    assert 'data-publish="published"' in row and ">published<" in row and "not published" not in row
    page = browser.get(f"/ui/images/{first.name}").text
    assert f'<span class="id">{pinned}</span>' in page
    assert "0a1b2c3d4e5f" in page and "sha256:" + "7e" * 32 in page and "referrers API" in page
    monkeypatch.setattr(images_views.engineimages, "image_id", lambda _ref: REBUILT_ID)
    row = row_of(browser.get("/ui/images").text, first.name)
    assert 'data-publish="rebuilt since"' in row and "published, but the image was rebuilt since" in row
    assert pinned in row and IMAGE_ID in row
