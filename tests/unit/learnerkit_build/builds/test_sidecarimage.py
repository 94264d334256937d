"""The sidecar image ships the sidecar package and its requirements: no module of the host's learnerkit."""

from __future__ import annotations

from pathlib import Path

from learnerkit_build.builds.sidecarimage import render_sidecar, sidecar_files
from learnerkit_build.recipes.render import BuildInputs

REPO = Path(__file__).resolve().parents[4]


def test_the_build_context_holds_only_the_sidecar_package() -> None:
    targets = [item.target for item in sidecar_files(REPO, BuildInputs())]
    assert "controller_sidecar/cli.py" in targets
    assert {target.split("/", 1)[0] for target in targets} == {"controller_sidecar"}


def test_the_dockerfile_copies_only_the_sidecar_package() -> None:
    text = render_sidecar(REPO, "example/base:1", BuildInputs())
    copies = [line for line in text.splitlines() if line.startswith(("COPY", "ADD"))]
    assert copies == ["COPY controller_sidecar /opt/sidecar/lib/controller_sidecar"]
