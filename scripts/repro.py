"""`make repro`: every locked cpu image, the sidecar and the base built twice from scratch, compared by image ID
and by the registry's manifest digest.

Each pair is built from two copies of the project in different folders, the second in a child process under a
clock 30 days ahead (faketime), TZ=Asia/Tokyo, umask 077 (its files with umask-077 modes) and its own hostname
(`learnerkit_build.builds.elsewhere`); images without BuildKit's cache (`--rebuild`), the base with mmdebstrap from its
lock into two scratch folders. Each build is written by skopeo to a fresh layout (gzip, level 6) and pushed
to its own repository of a docker-registry this script starts on 127.0.0.1. A pair that differs is saved and
compared (diffoscope, or learnerkit_build.repro.imagediff's listing), and the command exits 1. Prints, per image, the
two image IDs and manifest digests side by side, each build's seconds and what the second build saw. Not part
of `make test`.
Usage: python scripts/repro.py [base] [sidecar] [SPEC...]   (default: the base, the sidecar and every cpu variant
with a committed lock; a named SPEC must have one, cuda variants too)
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import recipe_for
from learnerkit_build.builds.basemake import base_archive
from learnerkit_build.builds.elsewhere import Environment, rebuild_elsewhere
from learnerkit_build.builds.elsewhere import days_ahead as elsewhere_days
from learnerkit_build.builds.images import build_image
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.lock.committed import image_lock_path
from learnerkit_build.publish.dirlayout import archive_source, daemon_source, push_image
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.pipconfig import BuildOptions, pip_config, resolve_build_inputs
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.repro.imagediff import describe_difference

REPO = Path(__file__).resolve().parents[1]
ELSEWHERE = Environment()
Build = Callable[[Path, Path], tuple[str, Path | None]]
"""(project copy, scratch folder) -> (image ID, the base's archive or None)."""


def quiet(_line: str) -> None:
    """Build logs are not this command's subject."""


def checkout(dest: Path, folders: list[str], *, private: bool) -> Path:
    for folder in folders:
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if private:
        for path in dest.rglob("*"):
            path.chmod(0o700 if path.is_dir() or path.stat().st_mode & 0o111 else 0o600)
    return dest


def base_build(root: Path, scratch: Path) -> tuple[str, Path | None]:
    archive, image_id = base_archive(recipe_for("debian-bookworm", root), scratch, quiet)
    return image_id, archive


def image_build(spec: str, inputs: BuildInputs) -> Build:
    def build(root: Path, _scratch: Path) -> tuple[str, Path | None]:
        result = build_image(root, load_matrix(root).select([spec])[0], inputs, quiet, rebuild=True)
        return str(result.image_id), None

    return build


def sidecar_build(inputs: BuildInputs) -> Build:
    def build(root: Path, _scratch: Path) -> tuple[str, Path | None]:
        return str(build_sidecar(root, inputs, quiet, rebuild=True).image_id), None

    return build


@contextmanager
def local_registry(folder: Path) -> Iterator[str]:
    """Debian's docker-registry on a free 127.0.0.1 port, its storage in `folder`; stopped on the way out."""
    exe = shutil.which("docker-registry")
    if exe is None:
        raise SystemExit("docker-registry is not installed: `make setup` installs it")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    config = folder / "config.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {folder / 'data'}}}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    with (folder / "registry.log").open("wb") as log:
        proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not _answers(f"http://127.0.0.1:{port}/v2/"):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"docker-registry did not answer on 127.0.0.1:{port}: see {folder}/registry.log")
                time.sleep(0.1)
            yield f"127.0.0.1:{port}"
        finally:
            proc.kill()
            proc.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def twice(name: str, folders: list[str], build: Build, work: Path, registry: str) -> bool:
    """Build `name` twice apart, the second in a varied environment (`learnerkit_build.builds.elsewhere`); push both
    through fresh layouts to two repositories; print both IDs and manifest digests; on a difference print
    what differs. True when identical."""
    folder = work / name.replace(":", "-")
    one, two = folder / "one", folder / "elsewhere" / "two"
    repository = "repro/" + name.replace(":", "-").replace(".", "-")
    (one / "scratch").mkdir(parents=True)
    started = time.monotonic()
    first, first_archive = build(checkout(one / "project", folders, private=False), one / "scratch")
    first_seconds = time.monotonic() - started
    source = archive_source(first_archive) if first_archive else daemon_source(first)
    first_pushed = push_image(source, one / "scratch", registry, f"{repository}-one", "t")
    (two / "scratch").mkdir(parents=True)
    root = checkout(two / "project", folders, private=True)
    started = time.monotonic()
    rebuilt = rebuild_elsewhere(name, root, two / "scratch", ELSEWHERE)
    second_seconds = time.monotonic() - started
    second_archive = Path(rebuilt.archive) if rebuilt.archive else None
    source = archive_source(second_archive) if second_archive else daemon_source(rebuilt.image_id)
    second_pushed = push_image(source, two / "scratch", registry, f"{repository}-two", "t")
    same_id = first == rebuilt.image_id
    same = same_id and (first_pushed.manifest, first_pushed.layers) == (second_pushed.manifest, second_pushed.layers)
    print(
        f"{name}: {'same' if same else 'DIFFERENT'}\n"
        f"  image ID  {first} ({first_seconds:.0f} s)  {rebuilt.image_id} ({second_seconds:.0f} s)\n"
        f"  manifest  {first_pushed.manifest}  {second_pushed.manifest}\n"
        f"  config    {first_pushed.config}  {second_pushed.config}\n"
        f"  layers    {len(first_pushed.layers)}  {len(second_pushed.layers)}, "
        f"{'the same digests' if first_pushed.layers == second_pushed.layers else 'DIFFERENT digests'}\n"
        f"  second build: clock {elsewhere_days(rebuilt.clock):+.1f} days, {rebuilt.zone}, umask "
        f"{rebuilt.umask:03o}, hostname {rebuilt.hostname}"
        + (f", mmdebstrap's clock {rebuilt.build_clock}" if rebuilt.build_clock else ""),
        flush=True,
    )
    if not same_id:
        print(
            describe_difference(*_archives(first, first_archive, rebuilt.image_id, second_archive, folder)), flush=True
        )
        if engine.image_id(first) and not engine.engine().images.get(first).tags:
            engine.remove_image(first)
    return same


def _archives(
    first: str, first_archive: Path | None, second: str, second_archive: Path | None, folder: Path
) -> tuple[Path, Path]:
    """The two builds as archives: the base's are already there; an image's are saved from the engine."""
    if first_archive and second_archive:
        return first_archive, second_archive
    engine.save_image(first, folder / "one.tar")
    engine.save_image(second, folder / "two.tar")
    return folder / "one.tar", folder / "two.tar"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("specs", nargs="*")
    args = parser.parse_args()
    named = set(args.specs)
    specs = [spec for spec in args.specs if spec not in ("base", "sidecar")]
    matrix = load_matrix(REPO)
    if specs:
        locked = matrix.select(specs)
        unlocked = [image.name for image in locked if not image_lock_path(image).is_file()]
        if unlocked:
            sys.exit(f"no committed lock, so no bit-for-bit rebuild: {', '.join(unlocked)} (see image lock)")
    else:
        every = [] if named else matrix.images
        locked = [image for image in every if image.variant_name == "cpu" and image_lock_path(image).is_file()]
    inputs = resolve_build_inputs(BuildOptions(), pip_config()).inputs
    with tempfile.TemporaryDirectory(prefix="learnerkit-repro-") as scratch:
        work = Path(scratch)
        (work / "registry").mkdir()
        results = []
        with local_registry(work / "registry") as registry:
            if not named or "base" in named:
                results.append(twice("base", ["learner_base", "frameworks/mxnet"], base_build, work, registry))
            if not named or "sidecar" in named:
                sidecar = sidecar_build(inputs)
                results.append(twice("sidecar", ["controller_sidecar", "learner_base"], sidecar, work, registry))
            for image in locked:
                folders = ["learner_base", f"frameworks/{image.framework.name}"]
                results.append(twice(image.name, folders, image_build(image.name, inputs), work, registry))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
