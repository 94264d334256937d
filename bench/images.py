"""Image benchmark: size overhead, no-op rebuild time, and cold build time against a plain install.

Prints per image (cpu and cuda), with every ratio against a baseline measured in the same run:
- image bytes, the framework's own installed bytes (site-packages, CUDA wheels included, and /opt/caffe),
  overhead MB (target <= 150 MB);
- no-op rebuild seconds (target <= 2 s);
- cold build seconds / a plain `pip install` of the same requirements on the same base with the same pip
  configuration (Caffe: its builder stage alone, the same compile without the learner image), both without
  cache (target <= 1.15);
- beside each cuda image, the published size of the anchors for its framework (NVIDIA NGC, AWS Deep Learning
  Containers) with their source, or why there is none.

Build inputs come from the host's pip configuration, as for `learnerkit image build`.
Usage: python bench/images.py [SPEC ...] [--no-cold]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.builds.buildkit import BuildRequest, run_build
from learnerkit_build.builds.images import base_ref_for, build_image, build_secrets, render_image
from learnerkit_build.recipes.context import assemble_context, tree_files, wheelhouse_files
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.recipes.spec import ImageSpec

REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000
ANCHORS = {
    "pytorch": "NGC pytorch:23.03-py3 ~20 GB (github.com/d4l3k/torchdrive/pull/4), 24.x ~22 GB "
    "(github.com/hiyouga/LlamaFactory/issues/4974); AWS DLC pytorch-training 2.0.1-gpu-cu118 ec2 20.6 GB, "
    "15.5 GB after a cut (github.com/aws/deep-learning-containers/pull/3270, /pull/3337)",
    "tensorflow": "NGC and AWS DLC tensorflow GPU: no published size found",
    "jax": "NGC jax: no published size found",
    "mxnet": "NGC mxnet, AWS DLC mxnet-training GPU: no published size found",
    "caffe": "NGC caffe (discontinued): no published size found",
}
"""Published sizes of vendor images for the same framework (uncompressed, as `docker images` shows), by source."""

# setuptools is the venv's own tooling unless a distribution requires it at run time (torch does): then it is
# the framework's. The Debian packages of the variant's `apt` (the runtime libraries the framework links, e.g.
# Caffe's Boost, HDF5 and OpenBLAS) are the framework's too.
FRAMEWORK_BYTES = (
    "import pathlib, re, sysconfig; from importlib import metadata;"
    "site = pathlib.Path(sysconfig.get_path('purelib'));"
    "needed = any(re.match(r'setuptools\\b', r) and 'extra ==' not in r "
    "for d in metadata.distributions() for r in (d.requires or []));"
    "skip = {'pip'} | (set() if needed else {'setuptools', '_distutils_hack', 'pkg_resources'});"
    "total = sum(f.stat().st_size for d in site.iterdir() if d.name.split('-')[0] not in skip "
    "for f in ([d] if d.is_file() else d.rglob('*')) if f.is_file() and not f.is_symlink());"
    "import subprocess, sys;"
    "files = subprocess.run(['dpkg-query', '-L', *sys.argv[1:]], capture_output=True, text=True).stdout.split()"
    " if sys.argv[1:] else [];"
    "total += sum(p.stat().st_size for p in map(pathlib.Path, files) if p.is_file() and not p.is_symlink());"
    "caffe = pathlib.Path('/opt/caffe');"
    "total += sum(f.stat().st_size for f in caffe.rglob('*') if f.is_file() and not f.is_symlink())"
    " if caffe.exists() else 0;"
    "print(total)"
)


def framework_bytes(reference: str, apt: list[str]) -> int:
    out = engine.engine().containers.run(
        reference, ["-c", FRAMEWORK_BYTES, *apt], entrypoint=["python3"], remove=True, network_mode="none"
    )
    return int(out.decode().strip().splitlines()[-1])


def baseline_dockerfile(image: ImageSpec, inputs: BuildInputs) -> str:
    """The plain way: the same base, Debian's python3, one pip install with the same pip.conf, no hardening.
    A template that compiles in builder stages (Caffe) has those stages alone as its plain build."""
    rendered = render_image(REPO, image, inputs)
    learner = rendered.index(f"\nFROM {base_ref_for(image)} AS learner")
    if "\nFROM " in rendered[:learner]:
        return rendered[:learner] + "\n"
    packages = " ".join(f"'{p}'" for p in image.variant.pip.packages) if image.variant.pip else ""
    return (
        f"FROM {base_ref_for(image)}\nRUN apt-get update && apt-get install -y --no-install-recommends python3 "
        f"python3-venv ca-certificates {' '.join(image.variant.apt)} && rm -rf /var/lib/apt/lists/*\n"
        "RUN --mount=type=secret,id=pip_conf,target=/run/secrets/pip.conf "
        "--mount=type=secret,id=ca,target=/run/secrets/ca.pem "
        "--mount=type=bind,source=.wheelhouse,target=/run/wheelhouse python3 -m venv /v "
        f"&& PIP_CONFIG_FILE=/run/secrets/pip.conf /v/bin/pip install --no-cache-dir {packages}\n"
    )


def time_baseline(image: ImageSpec, inputs: BuildInputs) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as scratch:
        context = Path(scratch) / "context"
        files = [*wheelhouse_files(inputs), *tree_files(image.folder, f"frameworks/{image.folder.name}")]
        assemble_context(context, baseline_dockerfile(image, inputs), files)
        secrets = build_secrets(Path(scratch), inputs)
        started = time.monotonic()
        image_id = run_build(
            BuildRequest(context, f"baseline {image.name}", {}, secrets, no_cache=True), lambda line: None
        )
        seconds = time.monotonic() - started
    engine.engine().images.remove(image_id, force=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold build comparison (slow)")
    args = parser.parse_args()
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    matrix = load_matrix(REPO)
    images = matrix.select(args.specs, select_all=not args.specs)
    header = f"{'image':<22}{'image MB':>10}{'fw MB':>9}{'overhead MB':>13}{'no-op s':>9}"
    header += "" if args.no_cold else f"{'cold s':>9}{'plain s':>9}{'ratio':>7}"
    print(header + "  anchors (cuda)")
    for image in images:
        built = build_image(REPO, image, inputs, lambda line: None)
        noop = build_image(REPO, image, inputs, lambda line: None)
        reference = built.reference
        size = engine.image_size(reference)
        fw = framework_bytes(reference, image.variant.apt)
        row = f"{image.name:<22}{size / MB:>10.0f}{fw / MB:>9.0f}{(size - fw) / MB:>13.0f}{noop.seconds:>9.2f}"
        if not args.no_cold:
            baseline = time_baseline(image, inputs)
            cold = build_image(REPO, image, inputs, lambda line: None, rebuild=True)
            row += f"{cold.seconds:>9.0f}{baseline:>9.0f}{cold.seconds / baseline:>7.2f}"
        if image.variant.accelerator == "cuda":
            row += f"  {ANCHORS.get(image.framework.name, 'no published size found')}"
        print(row, flush=True)
    print("targets: overhead <= 150 MB, no-op <= 2 s, cold / plain <= 1.15", file=sys.stderr)


if __name__ == "__main__":
    main()
