"""`job verify` asks the registry an image reference names (Debian's docker-registry on 127.0.0.1, images pushed
through its HTTP API) what it serves under the reference, instead of the local engine, which holds none of these."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from learnerkit.common.signing import load_public_key, public_key_path
from learnerkit.scheduler.client.imagedigest import image_answer
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.verify import Check, State, verify_folder
from learnerkit_build.publish.registry import put_blob, put_manifest
from tests.integration.conftest import free_port
from tests.unit.scheduler.provenance.jobfolder import LEARNER_ID, data_copy, describe, download, finished_job

REPOSITORY = "verify/learner"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"


def push(registry: str, tag: str, config: bytes) -> tuple[str, str]:
    """An image whose config is ``config`` under ``tag``: (its image ID, its manifest's digest)."""
    layer = b"layer of " + config
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": put_blob(registry, REPOSITORY, config),
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": put_blob(registry, REPOSITORY, layer),
                "size": len(layer),
            }
        ],
    }
    digest = put_manifest(registry, REPOSITORY, tag, json.dumps(manifest).encode(), MANIFEST_TYPE)
    return manifest["config"]["digest"], digest  # type: ignore[index,return-value]


def platform_architecture() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def learner_check(tmp_path: Path, reference: str, image_id: str) -> Check:
    """The learner image's check of a job that ran ``image_id`` under ``reference``, verified as `job verify`
    does it."""

    def images(image: str) -> ImageFact:
        return ImageFact(reference, image_id) if image == LEARNER_ID else describe(image)

    store, key = finished_job(tmp_path, images=images)
    folder = download(store, tmp_path / "download")
    report = verify_folder(
        folder, load_public_key(public_key_path(key)), data=data_copy(tmp_path / "data"), image_digest=image_answer
    )
    return next(check for check in report.checks if check.item == f"learner image {reference}")


def test_an_image_the_registry_still_serves_under_its_reference_verifies(registry: str, tmp_path: Path) -> None:
    image_id, _ = push(registry, "same", b'{"image": "same"}')
    check = learner_check(tmp_path, f"{registry}/{REPOSITORY}:same", image_id)
    assert (check.state, check.detail) == (State.OK, f"as registry {registry} has it")


def test_another_image_pushed_under_the_tag_fails_naming_the_image(registry: str, tmp_path: Path) -> None:
    ran, _ = push(registry, "moved", b'{"image": "the one the job ran"}')
    now, manifest = push(registry, "moved", b'{"image": "pushed since"}')
    reference = f"{registry}/{REPOSITORY}:moved"
    check = learner_check(tmp_path, reference, ran)
    assert check.state is State.CHANGED
    assert check.detail == (
        f"registry {registry} has {', '.join(sorted((now, manifest)))} under this reference, the job ran {ran}"
    )


def test_a_reference_by_index_is_read_down_to_this_platform(registry: str, tmp_path: Path) -> None:
    image_id, child = push(registry, "child", b'{"image": "in an index"}')
    _, other = push(registry, "other", b'{"image": "for another platform"}')
    platforms = (("windows", "amd64", other), ("linux", platform_architecture(), child), ("linux", "s390x", other))
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": [
            {"mediaType": MANIFEST_TYPE, "digest": digest, "size": 1, "platform": {"os": os, "architecture": arch}}
            for os, arch, digest in platforms
        ],
    }
    put_manifest(registry, REPOSITORY, "multi", json.dumps(index).encode(), INDEX_TYPE)
    check = learner_check(tmp_path, f"{registry}/{REPOSITORY}:multi", image_id)
    assert check.state is State.OK, check.detail


def test_a_tag_the_registry_does_not_have_is_not_checked_naming_the_registry(registry: str, tmp_path: Path) -> None:
    check = learner_check(tmp_path, f"{registry}/{REPOSITORY}:never-pushed", "sha256:" + "3" * 64)
    assert (check.state, check.detail) == (State.NOT_CHECKED, f"registry {registry} does not have it")


def test_a_registry_that_cannot_be_reached_is_named(tmp_path: Path) -> None:
    closed = f"127.0.0.1:{free_port()}"
    check = learner_check(tmp_path, f"{closed}/{REPOSITORY}:1", "sha256:" + "3" * 64)
    assert check.state is State.NOT_CHECKED
    assert check.detail.startswith(f"registry {closed} cannot be asked: GET http://{closed}/v2/{REPOSITORY}/"), check
