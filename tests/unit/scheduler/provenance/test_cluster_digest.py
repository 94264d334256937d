"""On Kubernetes the scheduler's engine is not the one that ran the learner, so the provenance named the learner
image by its reference alone: now it carries the digest the cluster reported it ran (the pod's ``imageID``), and
`job verify` can check it."""

from __future__ import annotations

import json
from base64 import b64decode
from pathlib import Path

import pytest

from learnerkit.common.engine import EngineError
from learnerkit.common.signing import load_public_key, public_key_path
from learnerkit.scheduler import factory
from learnerkit.scheduler.images.gate import ImageGate
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.verify import PROVENANCE_FILE, ImageAnswer, State, verify_folder
from tests.unit.scheduler.provenance.jobfolder import LEARNER_ID, describe, download, finished_job

REFERENCE = "registry.local/learnerkit/pytorch:2.3-cpu-py3.11"
RAN = "sha256:" + "4" * 64


def on_a_cluster(image: str) -> ImageFact:
    """As the scheduler describes an image its own engine does not hold: the reference, no digest."""
    return ImageFact(REFERENCE, "") if image == LEARNER_ID else describe(image)


def learner_dependency(folder: Path) -> dict[str, object]:
    envelope = json.loads((folder / PROVENANCE_FILE).read_text())
    statement = json.loads(b64decode(envelope["payload"]))
    dependencies = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    found: dict[str, object] = next(d for d in dependencies if d["name"] == "learner-image")
    return found


def test_the_digest_the_cluster_ran_is_in_the_provenance_and_verified(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path, images=on_a_cluster, ran_digest=RAN)
    folder = download(store, tmp_path / "download")
    assert learner_dependency(folder) == {
        "name": "learner-image",
        "uri": f"docker-image://{REFERENCE}",
        "digest": {"sha256": RAN.removeprefix("sha256:")},
    }

    def registry(reference: str) -> ImageAnswer:
        return ImageAnswer("registry registry.local", frozenset({RAN} if reference == REFERENCE else {"sha256:x"}))

    report = verify_folder(folder, load_public_key(public_key_path(key)), image_digest=registry)
    check = next(c for c in report.checks if c.item == f"learner image {REFERENCE}")
    assert check.state is State.OK, check.detail


def test_the_engines_own_digest_wins_over_the_reported_one(tmp_path: Path) -> None:
    store, _ = finished_job(tmp_path, ran_digest=RAN)
    assert learner_dependency(download(store, tmp_path / "download"))["digest"] == {
        "sha256": LEARNER_ID.removeprefix("sha256:")
    }


def test_an_image_deployed_by_its_registry_digest_is_named_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_engine(reference: str) -> str | None:
        raise EngineError("no engine here (a scheduler in a cluster)")

    monkeypatch.setattr(factory, "image_id", no_engine)
    pinned = f"registry.local/learnerkit/pytorch@{RAN}"
    assert factory.describe_image(ImageGate(("*",), ()))(pinned) == ImageFact(pinned, RAN)
