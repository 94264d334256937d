"""`image publish`'s flow past its gates, the engine, skopeo and the registry faked at their boundaries: the
tested image ID goes through a fresh layout, the local name follows only a push whose config is that image, and
the statements and signature name the digest the registry serves. The gates, the layout and the registry are
tested elsewhere; the whole against a real registry in tests/integration/learnerkit_build/test_scan_publish.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit_build.attestations import envelope as attest
from learnerkit_build.attestations.documents import PREDICATE_TYPES, ImageRecords
from learnerkit_build.publish import dirlayout, registry
from learnerkit_build.publish import push as publish
from learnerkit_build.publish.dirlayout import LayoutError, LayoutPush, PushedImage
from learnerkit_build.publish.push import PublishResult
from learnerkit_build.publish.records import load_publish_record
from learnerkit_build.publish.securityupdates import SecurityUpdates
from tests.unit.conftest import REPO

IMAGE_ID = "sha256:" + "a" * 64
HOST, REPOSITORY, TAG = "127.0.0.1:5000", "team/learner", "1"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
SECURITY = SecurityUpdates("bookworm-security", "2026-11-27T00:00:00Z", 90, [])


@dataclass
class World:
    """The faked boundaries, and what happened at them in order."""

    config: str = IMAGE_ID
    """The config digest the registry serves for the pushed image."""
    fail_push: bool = False
    events: list[tuple[str, ...]] = field(default_factory=list)
    manifests: dict[str, bytes] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def push_fresh(
        self, source: str, size: int, target_registry: str, repository: str, tag: str, on_line: Any
    ) -> LayoutPush:
        self.events.append(("push", source, str(size), f"{target_registry}/{repository}:{tag}"))
        if self.fail_push:
            raise LayoutError("skopeo copy failed (1): no space left on device")
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": self.config}})
        digest = self.put_manifest(HOST, repository, tag, body.encode(), DOCKER_MANIFEST)
        image = PushedImage(f"{target_registry}/{repository}:{tag}", digest, DOCKER_MANIFEST, self.config, (), 10)
        return LayoutPush(dirlayout.METHOD, "1.9.3", dirlayout.COMPRESSION_NAME, image, 1.0, 2.0)

    def put_manifest(self, host: str, repository: str, reference: str, body: bytes, media_type: str) -> str:
        digest = registry.sha256_digest(body)
        self.manifests[reference] = self.manifests[digest] = body
        self.events.append(("manifest", reference))
        return digest

    def put_manifest_subject(
        self, host: str, repository: str, reference: str, body: bytes, media_type: str
    ) -> tuple[str, bool]:
        return self.put_manifest(host, repository, reference, body, media_type), False

    def get_manifest(self, host: str, repository: str, reference: str) -> tuple[bytes, str] | None:
        body = self.manifests.get(reference)
        return None if body is None else (body, registry.sha256_digest(body))

    def statements(self, records: ImageRecords, remote: str, digest: str, root: Path) -> dict[str, Any]:
        self.events.append(("statements", remote, digest))
        return {kind: attest.statement(remote, digest, predicate, {}) for kind, predicate in PREDICATE_TYPES.items()}


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> World:
    fake = World()
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(publish, "check_gates", lambda reference: ImageRecords(IMAGE_ID, {}, {}, {}, {}))
    monkeypatch.setattr(publish, "check_vex", lambda records: None)
    monkeypatch.setattr(publish, "check_security", lambda *args: SECURITY)
    monkeypatch.setattr(publish, "statements", fake.statements)
    monkeypatch.setattr(publish.engine, "image_size", lambda image: 4_000_000)
    monkeypatch.setattr(publish.engine, "tag_image", lambda image, repo, tag: fake.events.append(("tag", image)))
    monkeypatch.setattr(publish.dirlayout, "push_fresh", fake.push_fresh)
    monkeypatch.setattr(registry, "put_blob", lambda host, repo, data: registry.sha256_digest(data))
    monkeypatch.setattr(registry, "put_manifest", fake.put_manifest)
    monkeypatch.setattr(registry, "put_manifest_subject", fake.put_manifest_subject)
    monkeypatch.setattr(registry, "get_manifest", fake.get_manifest)
    return fake


def run_publish(world: World) -> PublishResult:
    return publish.publish("learner:1", REPOSITORY, TAG, HOST, None, REPO, on_line=world.lines.append)


def test_the_tested_image_id_goes_through_a_fresh_layout_and_everything_signed_names_the_served_digest(
    world: World,
) -> None:
    done = run_publish(world)
    served = world.get_manifest(HOST, REPOSITORY, TAG)
    assert served is not None
    digest = served[1]
    assert world.events[0] == ("push", f"docker-daemon:{IMAGE_ID}", "4000000", f"{HOST}/{REPOSITORY}:{TAG}")
    assert world.events[1:4] == [("manifest", TAG), ("tag", IMAGE_ID), ("statements", f"{HOST}/{REPOSITORY}", digest)]
    assert (done.digest, done.push.image.manifest, done.push.method) == (digest, digest, "skopeo-dir-layout")
    assert ("manifest", digest.replace(":", "-") + ".sig") in world.events
    signed = json.loads(world.manifests[digest.replace(":", "-") + ".sig"])
    assert signed["layers"][0]["annotations"][publish.referrers.COSIGN_SIGNATURE]
    assert world.lines == [
        f"learner:1 ({IMAGE_ID}) passed the test, scan, VEX and security gates",
        "5 attestations signed and attached (tag schema)",
    ]
    kept = load_publish_record(IMAGE_ID)
    assert kept is not None
    assert (kept.reference, kept.pinned, kept.key_id) == (
        "learner:1",
        f"{HOST}/{REPOSITORY}:{TAG}@{digest}",
        done.key_id,
    )
    assert (kept.discovery, kept.signature) == ("tag-schema", done.signature)
    assert [(a.kind, a.manifest) for a in kept.attestations] == [(a.kind, a.manifest) for a in done.attestations]
    assert all(a.manifest in world.manifests for a in kept.attestations)


def test_a_registry_config_other_than_the_tested_image_is_refused_before_the_local_name_or_a_signature(
    world: World,
) -> None:
    world.config = "sha256:" + "b" * 64
    with pytest.raises(LayoutError) as refused:
        run_publish(world)
    assert str(refused.value) == (
        f"{HOST}/{REPOSITORY}:{TAG}: the registry serves config {world.config}, not the tested image {IMAGE_ID}"
    )
    assert [event[0] for event in world.events] == ["push", "manifest"]
    assert load_publish_record(IMAGE_ID) is None


def test_a_failed_push_leaves_no_local_name_and_signs_nothing(world: World) -> None:
    world.fail_push = True
    with pytest.raises(LayoutError, match="no space left on device"):
        run_publish(world)
    assert [event[0] for event in world.events] == ["push"]
    assert load_publish_record(IMAGE_ID) is None


def test_a_push_whose_signature_fails_records_no_publish(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> str:
        raise registry.RegistryError("PUT .sig: 500")

    monkeypatch.setattr(publish.referrers, "push_cosign_signature", refuse)
    with pytest.raises(registry.RegistryError):
        run_publish(world)
    assert load_publish_record(IMAGE_ID) is None


def test_publish_json_carries_the_manifest_digest_and_how_it_was_pushed_without_progress_lines(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = run_publish(world)
    monkeypatch.setattr(publish, "publish", lambda *args, **kwargs: done)
    result = CliRunner().invoke(
        cli, ["image", "publish", f"{REPOSITORY}:{TAG}", "--registry", HOST, "--root", str(REPO), "--output", "json"]
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["digest"] == shown["push"]["image"]["manifest"] == done.digest
    assert shown["push"]["image"]["config"] == shown["image_id"] == IMAGE_ID
    assert {key: shown["push"][key] for key in ("method", "skopeo", "compression")} == {
        "method": "skopeo-dir-layout",
        "skopeo": "1.9.3",
        "compression": "gzip, level 6",
    }
