"""Image benchmark: size overhead, no-op rebuild time, and cold build time against a plain install.

Prints per image, with every ratio against a baseline measured in the same run:
- image bytes, the framework's own installed bytes, overhead MB (target <= 150 MB);
- no-op rebuild seconds (target <= 2 s);
- cold build seconds / a plain `pip install` (Caffe: Debian's `caffe-cpu`) of the same framework on the same
  base, both without cache (target <= 1.15).

Usage: python bench/images.py [SPEC ...] [--no-cold]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.buildkit import BuildRequest, run_build
from learnerkit_build.images import base_ref_for, build_image
from learnerkit_build.matrix import load_matrix
from learnerkit_build.render import BuildInputs
from learnerkit_build.spec import ImageSpec

REPO = Path(__file__).resolve().parents[1]
CA = Path("/etc/ssl/certs/ca-certificates.crt")
WHEELS = Path("/opt/wheels")
MB = 1_000_000

FRAMEWORK_BYTES = (
    "import pathlib, sysconfig; site = pathlib.Path(sysconfig.get_path('purelib'));"
    "skip = {'pip', 'setuptools', '_distutils_hack', 'pkg_resources'};"
    "total = sum(f.stat().st_size for d in site.iterdir() if d.name.split('-')[0] not in skip "
    "for f in ([d] if d.is_file() else d.rglob('*')) if f.is_file() and not f.is_symlink());"
    "caffe = pathlib.Path('/opt/caffe');"
    "total += sum(f.stat().st_size for f in caffe.rglob('*') if f.is_file() and not f.is_symlink())"
    " if caffe.exists() else 0;"
    "print(total)"
)


def framework_bytes(reference: str) -> int:
    out = engine.engine().containers.run(
        reference, ["-c", FRAMEWORK_BYTES], entrypoint=["python3"], remove=True, network_mode="none"
    )
    return int(out.decode().strip().splitlines()[-1])


def baseline_dockerfile(image: ImageSpec) -> str:
    """The plain way: the same base, Debian's python3, one pip install (or apt for Caffe), no hardening."""
    base = base_ref_for(image)
    if image.framework.name == "caffe":
        return (
            f"FROM {base}\nRUN apt-get update && apt-get install -y --no-install-recommends python3-caffe-cpu "
            "&& rm -rf /var/lib/apt/lists/*\n"
        )
    packages = " ".join(f"'{p}'" for p in image.variant.pip.packages) if image.variant.pip else ""
    apt = " ".join(image.variant.apt)
    return (
        f"FROM {base}\nRUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv "
        f"ca-certificates {apt} && rm -rf /var/lib/apt/lists/*\n"
        "RUN --mount=type=secret,id=ca,target=/ca.pem --mount=type=bind,source=.wheelhouse,target=/wheels "
        f"python3 -m venv /v && /v/bin/pip install --no-cache-dir --cert /ca.pem --find-links /wheels {packages}\n"
    )


def time_baseline(image: ImageSpec, inputs: BuildInputs) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as scratch:
        context = Path(scratch)
        (context / ".wheelhouse").mkdir()
        if inputs.wheelhouse:
            for wheel in inputs.wheelhouse.iterdir():
                (context / ".wheelhouse" / wheel.name).hardlink_to(wheel)
        (context / "Dockerfile").write_text(baseline_dockerfile(image))
        secrets = {"ca": inputs.ca_bundle} if inputs.ca_bundle else {}
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
    inputs = BuildInputs(wheelhouse=WHEELS if WHEELS.is_dir() else None, ca_bundle=CA if CA.is_file() else None)
    matrix = load_matrix(REPO)
    images = matrix.select(args.specs, select_all=not args.specs, variants=["cpu"])
    header = f"{'image':<22}{'image MB':>10}{'fw MB':>9}{'overhead MB':>13}{'no-op s':>9}"
    header += "" if args.no_cold else f"{'cold s':>9}{'plain s':>9}{'ratio':>7}"
    print(header)
    for image in images:
        built = build_image(REPO, image, inputs, lambda line: None)
        noop = build_image(REPO, image, inputs, lambda line: None)
        reference = built.reference
        size = engine.image_size(reference)
        fw = framework_bytes(reference)
        row = f"{image.name:<22}{size / MB:>10.0f}{fw / MB:>9.0f}{(size - fw) / MB:>13.0f}{noop.seconds:>9.2f}"
        if not args.no_cold:
            baseline = time_baseline(image, inputs)
            cold = build_image(REPO, image, inputs, lambda line: None, rebuild=True)
            row += f"{cold.seconds:>9.0f}{baseline:>9.0f}{cold.seconds / baseline:>7.2f}"
        print(row, flush=True)
    print("targets: overhead <= 150 MB, no-op <= 2 s, cold / plain <= 1.15", file=sys.stderr)


if __name__ == "__main__":
    main()
