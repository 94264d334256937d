"""`/v1/models` against Debian's docker-registry: a tenant reads, checks and verifies its own models and never
another tenant's; a scheduler without a catalog says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from learnerkit.common.keyring import PublishedKey
from learnerkit.common.signing import load_public_key, load_signer, public_key_path
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.catalog.service import move_alias
from learnerkit.scheduler.catalog.versions import Store, register
from learnerkit.scheduler.facade import JobView, SweepOfJob, SweepView, TrialView
from tests.integration.catalog.modeljob import job_folder
from tests.unit.scheduler.conftest import Tenants, tenants
from tests.unit.scheduler.fakefacade import FakeFacade

pytestmark = [pytest.mark.integration]
__all__ = ["tenants"]  # the API tests' tokens file, as a fixture here


def test_models_are_listed_shown_and_verified_for_their_tenant_only(
    registry: str, tmp_path: Path, tenants: Tenants
) -> None:
    fake = FakeFacade()
    folder, key = job_folder(tmp_path / "job")
    keys = [load_public_key(public_key_path(key))]
    version = register(Store(registry, "team-a"), "digits", folder, keys).version
    move_alias(Store(registry, "team-a"), "digits", "production", version, keys, load_signer(key), "alice", "now")
    published = [PublishedKey(keys[0].keyid, public_key_path(key).read_text(), True)]
    with TestClient(create_app(fake, tenants.path, keys=published, catalog=registry)) as client:
        a = {"Authorization": f"Bearer {tenants.a}"}
        b = {"Authorization": f"Bearer {tenants.b}"}
        listed = client.get("/v1/models", headers=a).json()
        assert {"name": "digits", "versions": [version]} in listed
        shown = client.get(f"/v1/models/digits/versions/{version}", headers=a).json()
        assert shown["version"] == version and shown["lineage"]["job"] == "job-7"
        assert client.get("/v1/models/digits/versions/production", headers=a).json()["version"] == version
        assert [m["alias"] for m in client.get("/v1/models/digits/history", headers=a).json()] == ["production"]
        verified = client.get("/v1/models/digits/verify/production", headers=a).json()
        assert verified["verified"] is True, verified
        other = client.get(f"/v1/models/digits/versions/{version}", headers=b)
        assert other.status_code == 404 and "tenant team-b" in other.text
        assert client.get("/v1/models", headers=b).json() == []
        assert client.get("/v1/models").status_code == 401
    with TestClient(create_app(fake, tenants.path)) as client:
        none = client.get("/v1/models", headers={"Authorization": f"Bearer {tenants.a}"})
        assert none.status_code == 404 and "LEARNERKIT_CATALOG_REGISTRY" in none.text


def test_an_alias_moves_through_the_api_only_on_proof_signed_by_the_platform(
    registry: str, tmp_path: Path, tenants: Tenants
) -> None:
    folder, key = job_folder(tmp_path / "job")
    unfair, _ = job_folder(tmp_path / "unfair", fairness="failed", key=key)
    keys = [load_public_key(public_key_path(key))]
    good = register(Store(registry, "team-a"), "api-digits", folder, keys).version
    bad = register(Store(registry, "team-a"), "api-digits", unfair, keys).version
    published = [PublishedKey(keys[0].keyid, public_key_path(key).read_text(), True)]
    app = create_app(FakeFacade(), tenants.path, keys=published, catalog=registry, signer=load_signer(key))
    with TestClient(app) as client:
        a = {"Authorization": f"Bearer {tenants.a}"}
        moved = client.post("/v1/models/api-digits/aliases/production", headers=a, json={"version": good})
        assert moved.status_code == 200 and moved.json()["to"] == good and moved.json()["by"] == "tenant team-a"
        refused = client.post("/v1/models/api-digits/aliases/production", headers=a, json={"version": bad})
        assert refused.status_code == 409 and "evaluation thresholds" in refused.text, refused.text
        b = {"Authorization": f"Bearer {tenants.b}"}
        other = client.post("/v1/models/api-digits/aliases/production", headers=b, json={"version": good})
        assert other.status_code == 404
        assert [m["to"] for m in client.get("/v1/models/api-digits/history", headers=a).json()] == [good]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _trial(rung: int) -> TrialView:
    return TrialView(3, "job-7", "completed", rung, 4, (0.9, 0.95), "rung 2: 1st of 3")


def test_the_scheduler_registers_a_completed_job_of_the_tenant_from_its_stored_outputs(
    registry: str, tmp_path: Path, tenants: Tenants
) -> None:
    folder, key = job_folder(tmp_path / "job")
    keys = [load_public_key(public_key_path(key))]
    published = [PublishedKey(keys[0].keyid, public_key_path(key).read_text(), True)]
    fake = FakeFacade()
    files = {**_files(folder), "attempt-1/learner-1/checkpoints/step-1.pt": b"not registered"}
    fake.add(JobView("job-7", "team-a", "mnist", "COMPLETED", sweep=SweepOfJob("sweep-1", 3)), files=files)
    fake.sweeps["sweep-1"] = SweepView(
        "sweep-1", "team-a", "done", "", "hyperband", "accuracy", "max", "epochs", (2, 4), 9, 3, "", (_trial(2),)
    )
    fake.add(JobView("job-8", "team-a", "mnist", "PROCESSING"), files=files)
    fake.add(JobView("job-9", "team-a", "copied", "COMPLETED"), files=files)
    app = create_app(fake, tenants.path, keys=published, catalog=registry, signer=load_signer(key))
    with TestClient(app) as client:
        a = {"Authorization": f"Bearer {tenants.a}"}
        done = client.post("/v1/models/from-job/versions", headers=a, json={"job": "job-7"})
        assert done.status_code == 200, done.text
        version = done.json()
        assert version["job"] == "job-7" and version["version"].startswith("sha256:")
        assert {b["path"] for b in version["files"]} == {"attempt-1/learner-1/results/model.bin"}
        sweep = version["lineage"]["sweep"]
        assert (sweep["sweep"], sweep["trial"], sweep["job"], sweep["rung"]) == ("sweep-1", 3, "job-7", 2), sweep
        shown = client.get(f"/v1/models/from-job/versions/{version['version']}", headers=a).json()
        assert shown["lineage"] == version["lineage"]
        # The trial and rung are signed (the provenance signs only the parameters): the lineage gate holds.
        moved = client.post("/v1/models/from-job/aliases/production", headers=a, json={"version": version["version"]})
        assert moved.status_code == 200, moved.text
        verified = client.get("/v1/models/from-job/verify/production", headers=a).json()
        lineage_check = next(c for c in verified["checks"] if c["gate"] == "lineage")
        assert verified["verified"] is True and lineage_check["state"] == "ok", verified
        b = {"Authorization": f"Bearer {tenants.b}"}
        other = client.post("/v1/models/from-job/versions", headers=b, json={"job": "job-7"})
        assert other.status_code == 404 and "no job 'job-7'" in other.text, other.text
        running = client.post("/v1/models/from-job/versions", headers=a, json={"job": "job-8"})
        assert running.status_code == 409 and "PROCESSING" in running.text, running.text
        copied = client.post("/v1/models/copied/versions", headers=a, json={"job": "job-9"})
        assert copied.status_code == 400 and "provenance is of job job-7" in copied.text, copied.text
        listed = client.get("/v1/models", headers=a).json()
        assert {"name": "from-job", "versions": [version["version"]]} in listed  # job-9's copy stored nothing
    with TestClient(create_app(fake, tenants.path, keys=published, catalog=registry)) as unsigned:
        a = {"Authorization": f"Bearer {tenants.a}"}
        done = unsigned.post("/v1/models/unsigned-trial/versions", headers=a, json={"job": "job-7"})
        assert done.status_code == 200, done.text
        assert done.json()["lineage"]["sweep"] is None  # no key to sign the trial: none named (nor parameters here)
