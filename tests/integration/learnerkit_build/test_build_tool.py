"""The build tool against the real engine: caching, no half-made tags, secrets never in a layer, plug-ins."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit_build.builds.images import build_image
from learnerkit_build.builds.prune import prune
from learnerkit_build.errors import BuildError
from learnerkit_build.imagetest.runner import run_image_tests
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.recipes.scaffold import scaffold_framework
from learnerkit_build.recipes.spec import ImageSpec
from tests.integration.conftest import CA_BUNDLE, REPO
from tests.tiers import current_tier
from tests.waiting import wait_until

LEARNERKIT = [sys.executable, "-m", "learnerkit"]


def framework_with_step(root: Path, name: str, run: str, image_cleanup: list[str]) -> ImageSpec:
    """A scaffolded framework whose template adds one `RUN` step to the learner stage."""
    scaffold_framework(root, name, None, [])
    template = (
        f'{{% extends "learner_base/Dockerfile.j2" %}}\n{{% block framework_files %}}\nRUN {run}\n{{% endblock %}}\n'
    )
    (root / "frameworks" / name / "Dockerfile.j2").write_text(template, encoding="utf-8")
    image_cleanup.append(f"learnerkit/{name}")
    return load_matrix(root).select([f"{name}:1.0-cpu"])[0]


def test_building_the_tier_twice_does_nothing_the_second_time() -> None:
    argv = [*LEARNERKIT, "image", "build", "--tier", current_tier().name, "-o", "json"]
    first = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO).stdout)
    second = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO).stdout)
    assert {item["status"] for item in second["images"]} == {"cached"}  # its cuda variants too: nothing is skipped
    assert second["fill"] is None  # nothing to build: the lock cache was not even planned
    assert [item["image_id"] for item in first["images"]] == [item["image_id"] for item in second["images"]]


def test_the_plain_command_says_where_each_build_input_came_from() -> None:
    argv = [*LEARNERKIT, "image", "build", "pytorch:2.13-cpu", "--quiet-log"]
    out = subprocess.run(
        argv, capture_output=True, text=True, check=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"}
    )
    table = out.stdout[: out.stdout.index("build\n")] if "build\n" in out.stdout else out.stdout
    assert "pip inside builds" in table and "index-url" in table and "ca-bundle" in table
    assert "default" in table or "pip config" in table


def test_a_wheel_no_source_offers_fails_the_build_naming_it(scratch_project: Path, image_cleanup: list[str]) -> None:
    scaffold_framework(scratch_project, "nowheel", None, ["learnerkit-no-such-wheel==0.0.1"])
    image_cleanup.append("learnerkit/nowheel")
    image = load_matrix(scratch_project).select(["nowheel:1.0-cpu"])[0]
    with pytest.raises(BuildError) as caught:
        build_image(scratch_project, image, BuildInputs(), lambda line: None)
    assert "no index or find-links offers learnerkit-no-such-wheel==0.0.1" in caught.value.reason
    assert "--find-links" in caught.value.reason and "--extra-index-url" in caught.value.reason
    assert engine.engine().images.list(name="learnerkit/nowheel") == []


def test_failed_build_leaves_no_tag_and_shows_the_log_tail(scratch_project: Path, image_cleanup: list[str]) -> None:
    image = framework_with_step(scratch_project, "broken", 'echo "planted failure" && exit 3', image_cleanup)
    with pytest.raises(BuildError) as caught:
        build_image(scratch_project, image, BuildInputs(), lambda line: None)
    assert "planted failure" in caught.value.log_tail
    assert "broken:1.0-cpu" in str(caught.value)
    assert engine.engine().images.list(name="learnerkit/broken") == []


def test_interrupted_build_leaves_no_tag(scratch_project: Path, image_cleanup: list[str]) -> None:
    # The marker is printed by the step, not found in its command line (BuildKit echoes the command as the
    # step's name), and the run id keeps BuildKit's cache from answering the step without running it.
    run_id = uuid.uuid4().hex
    framework_with_step(scratch_project, "slow", f"echo slow-step-$((6 * 7))-{run_id} && sleep 120", image_cleanup)
    argv = [*LEARNERKIT, "image", "build", "slow:1.0-cpu", "--root", str(scratch_project), "--no-ca-bundle"]
    log = scratch_project / "build.log"
    with log.open("wb") as sink:
        # As at a terminal where Ctrl-C is pressed: a test run started in the background (`make test &`) ignores
        # SIGINT, and a child inherits an ignored signal, so the build would never see it.
        proc = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            wait_until(
                lambda: f"slow-step-42-{run_id}".encode() in log.read_bytes() or proc.poll() is not None,
                timeout=300,
                message="the slow step",
            )
            assert proc.poll() is None, log.read_text()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) != 0
        finally:
            proc.kill()
    assert engine.engine().images.list(name="learnerkit/slow") == []


def layer_bytes(docker_client: Any, image_id: str) -> bytes:
    """Every file of every layer of the image, concatenated (names and contents)."""
    archive = io.BytesIO(b"".join(docker_client.images.get(image_id).save()))
    out = io.BytesIO()
    with tarfile.open(fileobj=archive) as outer:
        for member in outer.getmembers():
            if not member.name.endswith("layer.tar"):
                continue
            with tarfile.open(fileobj=outer.extractfile(member)) as layer:
                for item in layer.getmembers():
                    out.write(item.name.encode() + b"\n")
                    if item.isfile() and item.size < 50_000_000:
                        out.write(layer.extractfile(item).read())  # type: ignore[union-attr]
    return out.getvalue()


@pytest.mark.timeout(1800)
def test_scaffolded_framework_builds_with_secrets_outside_layers_and_passes_tests(
    scratch_project: Path, tmp_path: Path, docker_client: Any, image_cleanup: list[str]
) -> None:
    """A new framework needs no Python: `framework new`, build, test. The CA bundle (marked) and the
    wheelhouse reach pip inside the build, yet neither lands in any layer."""
    scaffold_framework(scratch_project, "plugin", "plug-in proof", ["six==1.17.0"])
    image_cleanup.append("learnerkit/plugin")
    marker = "learnerkit-secret-marker-4c1d"
    ca = tmp_path / "ca.pem"
    ca.write_text(f"# {marker}\n" + CA_BUNDLE.read_text(encoding="utf-8"), encoding="utf-8")
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / f"{marker}-0.0.0-py3-none-any.whl").write_bytes(marker.encode())
    inputs = BuildInputs(wheelhouses=(wheelhouse,), ca_bundle=ca)
    image = load_matrix(scratch_project).select(["plugin:1.0-cpu"])[0]

    result = build_image(scratch_project, image, inputs, lambda line: None)
    assert result.status == "built"
    content = layer_bytes(docker_client, result.image_id or "")
    assert marker.encode() not in content
    assert b"six.py" in content  # pip did reach the index through the CA secret
    contexts = [r for r in docker_client.df().get("BuildCache") or [] if r["Type"] == "source.local" and not r["InUse"]]
    assert contexts == [], "BuildKit kept its copy of the build context (every rebuild of a large image adds one)"

    [report] = run_image_tests(scratch_project, [image], [], verbose=False)
    failed = {check.name: check.detail for check in report.checks if check.status != "pass"}
    assert not failed, failed
    again = build_image(scratch_project, image, inputs, lambda line: None)
    assert (again.status, again.image_id) == ("cached", result.image_id)

    script = scratch_project / "frameworks" / "plugin" / "smoke" / "train.py"
    script.write_text(script.read_text(encoding="utf-8") + "# a changed input\n", encoding="utf-8")
    changed = build_image(scratch_project, image, inputs, lambda line: None)
    assert changed.status == "built" and changed.inputs_hash != result.inputs_hash
    pruned = [item.tag for item in prune([image], dry_run=False) if item.tag.startswith("learnerkit/plugin")]
    assert pruned == [result.immutable_reference]
    assert engine.image_id(changed.immutable_reference) == changed.image_id
    assert engine.image_id(result.immutable_reference) is None
