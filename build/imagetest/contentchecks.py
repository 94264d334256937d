"""Checks of what an image holds for its accelerator: CUDA packages, the framework's CUDA build, its libraries.

A `cpu` image holds no CUDA distribution. A `cuda` image's framework was built with CUDA, at the versions
and for the compute capabilities its framework.yaml says. In every image, every shared library of the
framework (its pip packages but the CUDA ones, and what a template built under /opt), and everything those
link, resolves inside the image except the driver's, which the NVIDIA container runtime brings from the host.
Optional plug-ins of the CUDA libraries (fabric transports that need the host's InfiniBand or MPI libraries)
are not the framework's and are left out. All of this runs without a GPU: it stops at the driver boundary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from learnerkit_build.imagetest import image_inspect
from learnerkit_build.imagetest.checks import CheckContext, CheckFailure, expect
from learnerkit_build.imagetest.containers import GpusRefused, LearnerRun, output_of
from learnerkit_build.recipes.spec import ImageSpec, is_cuda_distribution

DRIVER_LIBRARIES = ("libcuda.so.1",)
"""Libraries only the host's driver provides: the one thing a learner image may leave unresolved."""
VENV_PYTHON = "/opt/learner/venv/bin/python"
INSPECT_TIMEOUT = 600.0
LISTED = 8


def last_json(output: str, what: str) -> dict[str, Any]:
    """The last line of `output` that is a JSON object: what an in-image program reported."""
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                return dict(json.loads(line))
            except ValueError:
                break
    raise CheckFailure(f"{what} printed no JSON report: {output.strip()[-600:]}")


def inspect(ctx: CheckContext, *args: str) -> dict[str, Any]:
    """Run `image_inspect` inside the image (as the learner, without network)."""
    source = Path(image_inspect.__file__).read_text(encoding="utf-8")
    run = LearnerRun(ctx.reference, ctx.job("inspect"), [VENV_PYTHON, "-c", source, *args])
    status, out = output_of(run, timeout=INSPECT_TIMEOUT)
    expect(status == 0, f"the image inspection exited {status}: {out.strip()[-600:]}")
    return last_json(out, "the image inspection")


def probe(ctx: CheckContext) -> tuple[dict[str, Any], str]:
    """The framework's own report of its build (smoke.probe), with the engine's GPUs when asked for."""
    command = ctx.image.framework.smoke.probe
    if command is None:
        raise CheckFailure("framework.yaml has no smoke.probe to ask the framework what it was built with")
    note = ""
    try:
        status, out = output_of(LearnerRun(ctx.reference, ctx.job("probe"), command, gpus=ctx.gpus), timeout=300)
    except GpusRefused as e:
        note = f"; probed without GPUs ({e})"
        status, out = output_of(LearnerRun(ctx.reference, ctx.job("probe"), command), timeout=300)
    expect(status == 0, f"{' '.join(command)} exited {status}: {out.strip()[-600:]}")
    return last_json(out, " ".join(command)), note


def same_version(have: str | None, want: str) -> bool:
    """Whether `have` is `want` or a release of it (`12.5.1` is `12.5`, `12.50` is not)."""
    return have is not None and str(have).split(".")[: len(want.split("."))] == want.split(".")


def check_variant_content(ctx: CheckContext) -> str:
    cuda = ctx.image.variant.cuda
    report = inspect(ctx, "content", *([cuda.library] if cuda else []))
    held = [name for name in report["distributions"] if is_cuda_distribution(name)]
    if cuda is None:
        expect(not held, f"a cpu image holds CUDA packages: {', '.join(held)}")
        return "no nvidia-*, cuda-* or triton packages"
    expect(bool(held), "a cuda image without nvidia-* packages: its CUDA libraries must come as wheels")
    found, note = probe(ctx)
    name = ctx.image.framework.name
    expect(bool(found.get("cuda")), f"{name} was not built with CUDA: {found}")
    expect(
        same_version(found["cuda"], cuda.version),
        f"{name} was built with CUDA {found['cuda']}, framework.yaml says {cuda.version}",
    )
    if cuda.cudnn is None:
        expect(not found.get("cudnn"), f"{name} uses cuDNN {found.get('cudnn')}, framework.yaml says none")
    else:
        expect(
            same_version(found.get("cudnn"), cuda.cudnn),
            f"{name} uses cuDNN {found.get('cudnn')}, framework.yaml says {cuda.cudnn}",
        )
    capabilities: list[str] | None = report.get("capabilities")
    if capabilities is None:
        raise CheckFailure(f"no CUDA library {report.get('library')} in the image")
    expect(
        set(capabilities) == set(cuda.capabilities),
        f"{report['library']} carries {' '.join(capabilities)}; framework.yaml says {' '.join(cuda.capabilities)}",
    )
    if ctx.gpus and not note:
        expect(found.get("gpus", 0) > 0, f"the engine gave the container GPUs, but {name} sees none: {found}")
    return (
        f"CUDA {found['cuda']}, cuDNN {found.get('cudnn') or 'none'}, {' '.join(capabilities)}; "
        f"{found.get('gpus', 0)} GPU(s) seen{note}"
    )


def framework_distributions(image: ImageSpec) -> list[str]:
    """The variant's own pip packages but its CUDA libraries: the distributions that make up the framework."""
    packages = image.variant.pip.packages if image.variant.pip else []
    names = [Requirement(package).name for package in packages]
    return [name for name in names if not is_cuda_distribution(name)]


def check_shared_libraries(ctx: CheckContext) -> str:
    unresolved: dict[str, list[str]] = inspect(ctx, "libraries", *framework_distributions(ctx.image))["unresolved"]
    broken = {
        library: [name for name in missing if name not in DRIVER_LIBRARIES] for library, missing in unresolved.items()
    }
    broken = {library: missing for library, missing in broken.items() if missing}
    shown = "; ".join(f"{library}: {', '.join(missing)}" for library, missing in sorted(broken.items())[:LISTED])
    more = f" (and {len(broken) - LISTED} more)" if len(broken) > LISTED else ""
    expect(not broken, f"{len(broken)} shared libraries do not resolve: {shown}{more}")
    needs_driver = sum(1 for missing in unresolved.values() if missing)
    driver = f"; {needs_driver} need the host's driver ({', '.join(DRIVER_LIBRARIES)})" if needs_driver else ""
    return f"every shared library of the framework resolves{driver}"
