"""Locks: the file format, the content-addressed cache, and what a locked Dockerfile installs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from learnerkit_build.images import render_image
from learnerkit_build.lock.cache import admit, cached_path, locked_context_files
from learnerkit_build.lock.compute import (
    SIDECAR_LOCK,
    base_lock_path,
    image_lock,
    image_lock_path,
    image_target,
    shared_distributions,
)
from learnerkit_build.lock.model import (
    LockedDeb,
    LockedWheel,
    LockError,
    lock_json,
    make_lock,
    pip_requirements,
    read_lock,
    write_lock,
)
from learnerkit_build.locking import lockable
from learnerkit_build.matrix import load_matrix
from learnerkit_build.render import BuildInputs
from learnerkit_build.sidecarimage import render_sidecar
from tests.unit.conftest import VALID_YAML, MakeProject

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def a_lock(tmp_path: Path) -> Path:
    """A lock of one .deb and one wheel whose files are in the (temporary) cache."""
    deb, wheel = tmp_path / "tini_0.19.0-1_amd64.deb", tmp_path / "six-1.17.0-py2.py3-none-any.whl"
    deb.write_bytes(b"a deb")
    wheel.write_bytes(b"a wheel")
    lock = make_lock(
        "toy",
        [
            LockedDeb("tini", "0.19.0-1", "amd64", deb.name, admit(deb), "image"),
            LockedDeb("bash", "5.2", "amd64", "bash_5.2_amd64.deb", "0" * 64, "base"),
        ],
        [LockedWheel("six", "1.17.0", wheel.name, admit(wheel))],
    )
    path = tmp_path / "lock.json"
    write_lock(path, lock)
    return path


def test_a_lock_reads_back_equal_and_writes_the_same_bytes(home: Path, tmp_path: Path) -> None:
    path = a_lock(tmp_path)
    lock = read_lock(path)
    assert lock_json(lock) == path.read_bytes()
    assert lock.dpkg_list() == "bash=5.2\ntini=0.19.0-1\n"
    assert [name for name, _ in lock.files()] == ["tini_0.19.0-1_amd64.deb", "six-1.17.0-py2.py3-none-any.whl"]
    assert "six==1.17.0 --hash=sha256:" in pip_requirements(lock.python)
    assert path.stat().st_mode & 0o777 == 0o644, "a committed file: readable as git checks it out"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(scheme="other/1"), r"scheme is not 'learnerkit-lock/1'"),
        (lambda d: d["python"][0].update(sha256="abc"), r"python\[0\] \(six-1\.17\.0.*\): sha256 is not 64 hex"),
        (lambda d: d["debian"][1].pop("version"), r"debian\[1\] must have exactly the string fields"),
        (lambda d: d["debian"][1].update(filename="../x.deb"), r"debian\[1\]: filename '\.\./x\.deb' is not a plain"),
        (lambda d: d["debian"][1].update(origin="host"), r"debian entry tini: origin must be base or image"),
    ],
)
def test_a_malformed_lock_is_refused_naming_the_file_and_entry(home: Path, tmp_path: Path, edit, message) -> None:  # type: ignore[no-untyped-def]
    path = a_lock(tmp_path)
    payload = json.loads(path.read_text(encoding="utf-8"))
    edit(payload)
    path.write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(LockError, match=rf"{path}: {message}"):
        read_lock(path)


def test_a_missing_lock_names_the_command_that_makes_it(tmp_path: Path) -> None:
    with pytest.raises(LockError, match=r"no lock file \(make it with `learnerkit image lock`\)"):
        read_lock(tmp_path / "nope.json")


def test_the_cache_admits_a_file_only_under_its_locked_sha256(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "x.whl"
    other.write_bytes(b"not the locked bytes")
    with pytest.raises(LockError, match=r"x\.whl: sha256 [0-9a-f]{64} is not the locked " + "1" * 64):
        admit(other, "1" * 64)
    assert not any(cached_path("1" * 64).parent.glob("*1111*"))


def test_a_cached_file_changed_after_admission_fails_the_build_context(home: Path, tmp_path: Path) -> None:
    path = a_lock(tmp_path)
    lock = read_lock(path)
    targets = [item.target for item in locked_context_files(lock)]
    assert (
        ".locked/wheels/six-1.17.0-py2.py3-none-any.whl" in targets
        and ".locked/debs/tini_0.19.0-1_amd64.deb" in targets
    )
    stored = cached_path(lock.python[0].sha256)
    stored.chmod(0o644)
    stored.write_bytes(b"a wheel, changed")
    with pytest.raises(
        LockError, match=r"toy: the lock cache's six-1\.17\.0-py2\.py3-none-any\.whl .* is not the locked"
    ):
        locked_context_files(lock)


def test_a_locked_image_installs_only_its_lock_and_its_venv_has_no_pip() -> None:
    image = load_matrix(REPO).select(["mxnet:1.9.1-cpu"])[0]
    assert image_lock_path(image).exists()
    text = render_image(REPO, image, BuildInputs())
    learner = text[text.rindex("\nFROM ") :]
    assert "apt-get update" not in learner and "/bin/pip install" not in learner
    assert "apt-get install -y --no-install-recommends /run/locked/debs/*.deb" in learner
    for flag in ("--no-index", "--find-links /run/locked/wheels", "--require-hashes", "--no-deps"):
        assert flag in learner
    assert "python3 -m venv --without-pip /opt/learner/venv" in learner
    assert "diff - /run/locked/dpkg.txt" in learner and "diff - /run/locked/python.txt" in learner
    sidecar = render_sidecar(REPO, "example/base:1", BuildInputs(), locked=True)
    assert "python3 -m venv --without-pip /opt/sidecar/venv" in sidecar and "--require-hashes" in sidecar


def test_only_images_that_install_through_the_locked_steps_are_lockable() -> None:
    """The evaluator images are (their shared layer installs from the lock); caffe is not, naming each stage that
    installs from mirrors or indexes: its builder compiles against unlocked packages."""
    matrix = load_matrix(REPO)
    specs = ["mxnet:1.9.1-cpu", "robustness:1.20-cpu", "fairness:0.6-cpu", "caffe:1.0-cpu"]
    kept, refused = lockable(matrix.select(specs))
    assert [image.name for image in kept] == ["mxnet:1.9.1-cpu", "robustness:1.20-cpu", "fairness:0.6-cpu"]
    assert [r.name for r in refused] == ["caffe:1.0-cpu"]
    assert refused[0].status == (
        "refused: caffe:1.0-cpu: not lockable: its template installs outside the locked steps (stage caffe-builder: "
        "apt-get from the mirrors, pip download from the indexes; stage learner: pip from the indexes), so what it "
        "builds would not follow from a lock"
    )
    with pytest.raises(LockError, match=r"caffe:1\.0-cpu: not lockable"):
        image_target(matrix.select(["caffe:1.0-cpu"])[0], "example/base:1")


def test_a_shared_requirement_its_template_never_installs_is_refused(make_project: MakeProject) -> None:
    yaml_text = VALID_YAML.replace(
        '          packages: ["six==1.17.0"]\n',
        '          packages: ["six==1.17.0"]\n          shared: ["six==1.17.0"]\n',
        1,
    )
    image = load_matrix(make_project(yaml_text)).select(["toy:1.0-cpu"])[0]
    with pytest.raises(LockError, match=r"toy:1\.0-cpu: framework.yaml's pip.shared is set but its template never"):
        image_target(image, "example/base:1")


def test_a_locked_evaluator_installs_its_shared_layer_from_the_lock_and_checks_the_venv_after_the_rest() -> None:
    """torch and numpy from .locked/shared, unchecked; then the rest from .locked, and the whole venv checked.
    Every step up to the shared layer is the same text in both evaluator images, and mounts only files that are
    the same in both (the .debs, the dpkg list, the shared wheels): BuildKit builds it once for the two."""
    images = load_matrix(REPO).select(["robustness:1.20-cpu", "fairness:0.6-cpu"])
    texts = [render_image(REPO, image, BuildInputs()) for image in images]
    for text in texts:
        learner = text[text.rindex("\nFROM ") :]
        shared_step = learner.index("RUN --mount=type=bind,source=.locked/shared,target=/run/locked")
        main_step = learner.index("RUN --mount=type=bind,source=.locked,target=/run/locked")
        assert learner.index("--mount=type=bind,source=.locked/debs,target=/run/locked/debs") < shared_step < main_step
        shared = learner[shared_step:main_step]
        for flag in ("--no-index", "--find-links /run/locked/wheels", "--require-hashes", "--no-deps"):
            assert flag in shared
        assert "diff -" not in shared and "pip check" not in shared
        assert "diff - /run/locked/python.txt" in learner[main_step:] and "pip check" in learner[main_step:]
        assert "/bin/pip install" not in learner and "apt-get update" not in learner
    prefixes = [text[text.index("\nFROM ") : text.index("\n", text.index("source=.locked/shared"))] for text in texts]
    assert prefixes[0] == prefixes[1]
    locks = [read_lock(image_lock_path(image)) for image in images]
    shared = [lock.wheels_split(shared_distributions(image))[0] for lock, image in zip(locks, images, strict=True)]
    assert [wheel.name for wheel in shared[0]] == ["numpy", "torch"] and shared[0] == shared[1]
    assert locks[0].debian == locks[1].debian


def test_the_shared_wheels_and_their_requirements_go_to_their_own_folder(home: Path, tmp_path: Path) -> None:
    lock = read_lock(a_lock(tmp_path))
    targets = {item.target: item.source for item in locked_context_files(lock, {"six"})}
    assert ".locked/shared/wheels/six-1.17.0-py2.py3-none-any.whl" in targets
    assert not any(target.startswith(".locked/wheels/") for target in targets)
    assert "six==1.17.0 --hash=sha256:" in targets[".locked/shared/requirements.txt"].read_text(encoding="utf-8")
    assert targets[".locked/requirements.txt"].read_text(encoding="utf-8") == ""
    assert targets[".locked/python.txt"].read_text(encoding="utf-8") == "six==1.17.0\n"
    assert ".locked/shared/requirements.txt" not in {item.target for item in locked_context_files(lock)}


def test_every_committed_lock_starts_from_the_committed_base_lock() -> None:
    """An image lock's base packages are the base lock's: computed on the same base, or the base moved."""
    base = read_lock(base_lock_path(REPO, "debian-bookworm"))
    assert base.debian and all(deb.origin == "base" for deb in base.debian) and not base.python
    locks = [read_lock(REPO / SIDECAR_LOCK)]
    locks += [read_lock(image_lock_path(i)) for i in load_matrix(REPO).images if image_lock_path(i).exists()]
    assert len(locks) >= 2
    for lock in locks:
        assert tuple(deb for deb in lock.debian if deb.origin == "base") == base.debian, lock.image
        assert lock.installed_debs() and lock.python, lock.image


def jax_copy(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REPO / "learner_base", root / "learner_base", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        REPO / "frameworks" / "jax", root / "frameworks" / "jax", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


def test_a_lock_of_another_version_is_refused_naming_the_file_the_pins_and_the_command(tmp_path: Path) -> None:
    """0.10's lock copied to 0.9 would install jax 0.10.2 in the image tagged 0.9: a locked build ignores the pins."""
    root = jax_copy(tmp_path)
    lock_dir = root / "frameworks" / "jax" / "lock"
    shutil.copyfile(lock_dir / "0.10-cpu.json", lock_dir / "0.9-cpu.json")
    image = load_matrix(root).select(["jax:0.9-cpu"])[0]
    with pytest.raises(LockError) as refused:
        render_image(root, image, BuildInputs())
    message = str(refused.value)
    assert message.startswith(
        f"{lock_dir / '0.9-cpu.json'}: not the lock of jax:0.9-cpu: it is the lock of jax:0.10-cpu"
    )
    assert "framework.yaml pins jax[cpu]==0.9.2, the lock holds 0.10.2" in message
    assert "framework.yaml pins jaxlib==0.9.2, the lock holds 0.10.2" in message
    assert message.endswith("(run `learnerkit image lock jax:0.9-cpu`)")


def test_a_pin_moved_after_locking_is_refused(tmp_path: Path) -> None:
    root = jax_copy(tmp_path)
    spec = root / "frameworks" / "jax" / "framework.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace('"jaxlib==0.9.2"]', '"jaxlib==0.9.1"]'), encoding="utf-8")
    image = load_matrix(root).select(["jax:0.9-cpu"])[0]
    with pytest.raises(LockError, match=r"framework.yaml pins jaxlib==0.9.1, the lock holds 0.9.2 \(run"):
        render_image(root, image, BuildInputs())


def test_every_committed_lock_is_its_images_as_framework_yaml_pins_it() -> None:
    locked = [image for image in load_matrix(REPO).images if image_lock_path(image).exists()]
    assert {"jax:0.10-cpu", "jax:0.9-cpu"} <= {image.name for image in locked}
    for image in locked:
        assert image_lock(image) is not None, image.name
