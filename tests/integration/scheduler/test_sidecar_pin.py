"""The sidecar image is pinned when the scheduler starts: a tag moved afterwards does not change what jobs run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit.common.signing import create_signer
from learnerkit.scheduler.config.settings import BackendSettings, EtcdSettings, SchedulerSettings, SigningSettings
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.errors import SettingsError
from learnerkit.scheduler.factory import create_scheduler
from learnerkit.scheduler.images.sidecar import pin_sidecar
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.recipes.render import BuildInputs
from tests.integration.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]


@pytest.fixture
def sidecar_tag(build_inputs: BuildInputs) -> Iterator[tuple[str, str, str]]:
    """This tree's sidecar under tags of this test alone: (version tag, image ID, content tag); another tag that
    merely looks like a content tag is never chosen."""
    built = build_sidecar(REPO, build_inputs, lambda line: None)
    assert built.immutable_reference is not None
    image_id = engine.image_id(built.immutable_reference)
    assert image_id is not None
    repository = f"learnerkit-test/sidecar-pin-{uuid.uuid4().hex[:8]}"
    content = built.immutable_reference.rpartition("-")[2]
    tags = [f"{repository}:0.1.0", f"{repository}:0.1.0-{content}", f"{repository}:0.1.0-feedbeef1234"]
    for tag in tags:
        engine.tag_image(image_id, *tag.split(":"))
    yield tags[0], image_id, tags[1]
    for tag in tags:
        engine.engine().images.remove(tag, noprune=True)


def test_the_scheduler_deploys_the_sidecar_by_the_id_its_tag_named_at_start(
    sidecar_tag: tuple[str, str, str], etcd_server: Any, tmp_path: Path
) -> None:
    tag, image_id, _ = sidecar_tag
    root = f"/learnerkit-pin-test-{uuid.uuid4().hex[:8]}/jobs"
    key = tmp_path / "signing-key.pem"
    create_signer(key)
    settings = SchedulerSettings(
        etcd=EtcdSettings(endpoints=(etcd_server.endpoint,), root=root),
        backend=BackendSettings(sidecar_image=tag),
        signing=SigningSettings(key=key),
    )
    hosted = create_scheduler(settings)
    scheduler, lifespan = hosted.facade, hosted.lifespan
    assert isinstance(scheduler, Scheduler) and lifespan is not None

    async def serve() -> str:
        async with lifespan():
            return scheduler.shared.options.platform.sidecar_image

    assert asyncio.run(serve()) == image_id


def test_kubernetes_gets_the_content_tag_and_a_missing_sidecar_is_refused(
    sidecar_tag: tuple[str, str, str],
) -> None:
    tag, image_id, content = sidecar_tag
    assert pin_sidecar(tag, by_id=True) == image_id
    assert pin_sidecar(tag, by_id=False) == content and pin_sidecar(content, by_id=False) == content
    digested = f"registry.example/learnerkit/sidecar@sha256:{'a' * 64}"
    assert pin_sidecar(digested, by_id=False) == digested and pin_sidecar(image_id, by_id=True) == image_id
    with pytest.raises(SettingsError, match="LEARNERKIT_SIDECAR_IMAGE"):
        pin_sidecar(f"learnerkit-test/absent-{uuid.uuid4().hex[:8]}:0.1.0", by_id=True)
