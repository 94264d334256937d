"""Locked builds against the real engine: the SBOM of a built image is its lock, and a lock that does not
describe what the install makes fails the build."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit_build.builds.images import build_image
from learnerkit_build.builds.sidecarimage import build_sidecar
from learnerkit_build.errors import BuildError
from learnerkit_build.lock.committed import SIDECAR_LOCK, image_lock_path
from learnerkit_build.lock.model import Lock, normalise_name, read_lock
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from learnerkit_build.scan.layers import index_archive
from learnerkit_build.scan.packages import deb_packages, python_dists, wanted
from learnerkit_build.scan.runner import image_lock
from learnerkit_build.scan.sbom import all_components, build_sbom, validate_sbom
from tests.integration.conftest import REPO
from tests.tiers import tiered_specs


def sbom_of(reference: str, tmp_path: Path) -> dict[str, Any]:
    archive = tmp_path / "image.tar"
    engine.save_image(reference, archive)
    try:
        index = index_archive(archive, reference, wanted=wanted)
    finally:
        archive.unlink()  # up to 3.8 GB a variant, and pytest keeps the last three runs' folders
    lock = image_lock(REPO, index)  # found by the image's labels, as `image scan` finds it
    assert lock is not None, f"no committed lock found for {reference}"
    sbom = build_sbom(index, index.config_digest, deb_packages(index) or [], python_dists(index), lock=lock)
    validate_sbom(sbom)
    return sbom


def assert_sbom_is_the_lock(sbom: dict[str, Any], lock: Lock) -> None:
    kinds = {c["bom-ref"].split(":", 1)[0] for c in sbom["components"] if "purl" in c}
    assert kinds <= {"deb", "pypi"}
    debs = {(c["name"], c["version"]) for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/")}
    dists = {
        (normalise_name(c["name"]), c["version"])
        for c in sbom["components"]
        if c.get("purl", "").startswith("pkg:pypi/")
    }
    locked_debs = {(d.package, d.version) for d in lock.debian}
    locked_dists = {(w.name, w.version) for w in lock.python}
    assert debs - locked_debs == set(), "in the image, not in the lock"
    assert locked_debs - debs == set(), "in the lock, not in the image"
    assert dists - locked_dists == set(), "in the image, not in the lock"
    assert locked_dists - dists == set(), "in the lock, not in the image"
    assert ("pip", "23.0.1") not in dists
    locked_files = {d.sha256 for d in lock.debian} | {w.sha256 for w in lock.python}
    for component in sbom["components"]:  # every package by the sha256 of its locked .deb or wheel
        if "purl" in component:
            [digest] = component["hashes"]
            assert digest["alg"] == "SHA-256" and digest["content"] in locked_files, component["name"]
    refs = {c["bom-ref"] for c in all_components(sbom)} | {sbom["metadata"]["component"]["bom-ref"]}
    assert {d["ref"] for d in sbom["dependencies"]} == refs
    assert all(set(d["dependsOn"]) <= refs for d in sbom["dependencies"])
    for component in sbom["components"]:
        for vendored in component.get("components", []):  # setuptools' _vendor: in its locked wheel's bytes
            assert vendored["purl"].startswith("pkg:pypi/"), vendored
            assert (normalise_name(component["name"]), component["version"]) in locked_dists, component


def test_the_sidecar_sbom_is_its_lock(build_inputs: BuildInputs, tmp_path: Path) -> None:
    built = build_sidecar(REPO, build_inputs, lambda _line: None)
    assert built.immutable_reference is not None
    assert_sbom_is_the_lock(sbom_of(built.immutable_reference, tmp_path), read_lock(REPO / SIDECAR_LOCK))


@pytest.mark.parametrize(
    "spec",
    tiered_specs(
        [
            "mxnet:1.9.1-cpu",
            "jax:0.10-cpu",
            "jax:0.9-cpu",
            "pytorch:2.13-cpu",
            "tensorflow:2.21-cpu",
            "robustness:1.20-cpu",
            "fairness:0.6-cpu",
            "caffe:1.0-cpu",
            # Two cuda variants (the smallest, 1.6 and 3.8 GB: the check saves the whole image); the others were
            # checked by hand when their locks were committed (docs/supply-chain.md).
            "caffe:1.0-cuda",
            "mxnet:1.9.1-cuda",
        ]
    ),
)
def test_a_learner_sbom_is_its_lock_and_its_venv_has_no_pip(
    spec: str, build_inputs: BuildInputs, tmp_path: Path
) -> None:
    image = load_matrix(REPO).select([spec])[0]
    built = build_image(REPO, image, build_inputs, lambda _line: None)
    assert built.immutable_reference is not None
    lock = read_lock(image_lock_path(image))
    assert "pip" not in {w.name for w in lock.python}
    assert_sbom_is_the_lock(sbom_of(built.immutable_reference, tmp_path), lock)


def test_a_lock_missing_a_dependency_fails_the_build(
    tmp_path: Path, build_inputs: BuildInputs, image_cleanup: list[str]
) -> None:
    """mxnet needs requests: a lock without it installs, but `pip check` in the same step fails the build."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "learner_base", root / "learner_base", ignore=shutil.ignore_patterns("__pycache__"))
    folder = root / "frameworks" / "lockedtoy"
    shutil.copytree(REPO / "frameworks" / "mxnet", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "framework.yaml").write_text(
        (folder / "framework.yaml").read_text(encoding="utf-8").replace("name: mxnet", "name: lockedtoy"),
        encoding="utf-8",
    )
    lock_file = folder / "lock" / "1.9.1-cpu.json"
    payload = json.loads(lock_file.read_text(encoding="utf-8"))
    payload["image"] = "lockedtoy:1.9.1-cpu"  # the copy's own lock, else it is refused as mxnet's
    payload["python"] = [w for w in payload["python"] if w["name"] != "requests"]
    lock_file.write_text(json.dumps(payload), encoding="utf-8")
    image_cleanup.append("learnerkit/lockedtoy")
    image = load_matrix(root).select(["lockedtoy:1.9.1-cpu"])[0]
    with pytest.raises(BuildError) as failed:
        build_image(root, image, build_inputs, lambda _line: None)
    assert "mxnet 1.9.1 requires requests" in failed.value.log_tail
    assert engine.image_id(f"learnerkit/lockedtoy:{image.tag}") is None
