"""TensorBoard event files written by the real writers inside the learner images (tf_scalars.py, torch_scalars.py)."""

from __future__ import annotations

from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.builds.images import build_image
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TENSORFLOW = "tensorflow:2.21-cpu"
PYTORCH = "pytorch:2.13-cpu"
"""Its image carries ``tensorboard`` (frameworks/pytorch/framework.yaml): SummaryWriter needs it."""


def learner_image(spec: str, inputs: BuildInputs) -> str:
    """The image of these exact inputs, by its content tag (built now unless it exists): other worktrees may
    move the version tag meanwhile."""
    image = next(image for image in load_matrix(REPO).images if image.name == spec)
    built = build_image(REPO, image, inputs, lambda line: None)
    if built.immutable_reference is None:
        raise AssertionError(f"{spec}: {built.status} {built.reason}")
    return built.immutable_reference


def write_events(image: str, script: str, out: Path, steps: int = 5) -> str:
    """Run ``script`` of this folder in ``image`` with ``out`` (host folder, made writable) as its output."""
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o777)
    output = engine.engine().containers.run(
        image,
        ["python3", f"/writers/{script}", "/out", str(steps)],
        entrypoint=[],
        volumes={str(HERE): {"bind": "/writers", "mode": "ro"}, str(out): {"bind": "/out", "mode": "rw"}},
        network_disabled=True,
        remove=True,
        stderr=True,
    )
    return bytes(output).decode("utf-8", "replace")
