"""Locks: the file format, the content-addressed cache, and what a locked Dockerfile installs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from learnerkit_build.builds.images import render_image
from learnerkit_build.builds.locking import lockable
from learnerkit_build.builds.sidecarimage import render_sidecar
from learnerkit_build.lock import compute
from learnerkit_build.lock import python as lockpython
from learnerkit_build.lock.cache import admit, cached_path, check_cached, locked_context_files, missing
from learnerkit_build.lock.committed import (
    SIDECAR_LOCK,
    base_lock_path,
    image_lock,
    image_lock_path,
    shared_distributions,
)
from learnerkit_build.lock.compute import image_target, unlocked_installs
from learnerkit_build.lock.model import (
    LockedDeb,
    LockedSource,
    LockedWheel,
    LockError,
    lock_json,
    make_builder,
    make_lock,
    pip_requirements,
    read_lock,
    write_lock,
)
from learnerkit_build.recipes.context import inputs_hash
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs, render_dockerfile
from learnerkit_build.recipes.spec import BuilderSpec
from tests.unit.conftest import VALID_YAML, MakeProject

REPO = Path(__file__).resolve().parents[4]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def cached(tmp_path: Path, name: str) -> str:
    """The sha256 of a small file `name`, admitted to the (temporary) cache."""
    (tmp_path / name).write_bytes(f"the bytes of {name}".encode())
    return admit(tmp_path / name)


def a_lock(tmp_path: Path, *, builder: bool = False) -> Path:
    """A lock of one .deb and one wheel whose files are in the (temporary) cache; `builder`: with a builder section
    of two .debs (one upgrades the base's bash), a wheel and a source distribution."""
    deb, wheel = "tini_0.19.0-1_amd64.deb", "six-1.17.0-py2.py3-none-any.whl"
    section = make_builder(
        [
            LockedDeb(
                "cmake", "3.25", "amd64", "cmake_3.25_amd64.deb", cached(tmp_path, "cmake_3.25_amd64.deb"), "image"
            ),
            LockedDeb("bash", "5.3", "amd64", "bash_5.3_amd64.deb", cached(tmp_path, "bash_5.3_amd64.deb"), "image"),
        ],
        [LockedWheel("nvcc", "13.0", "nvcc-13.0-py3-none-any.whl", cached(tmp_path, "nvcc-13.0-py3-none-any.whl"))],
        [LockedSource("toy-src", "1.0", "toy-src-1.0.tar.gz", cached(tmp_path, "toy-src-1.0.tar.gz"))],
    )
    lock = make_lock(
        "toy",
        [
            LockedDeb("tini", "0.19.0-1", "amd64", deb, cached(tmp_path, deb), "image"),
            LockedDeb("bash", "5.2", "amd64", "bash_5.2_amd64.deb", "0" * 64, "base"),
        ],
        [LockedWheel("six", "1.17.0", wheel, cached(tmp_path, wheel))],
        section if builder else None,
    )
    path = tmp_path / "lock.json"
    write_lock(path, lock)
    return path


def test_a_lock_reads_back_equal_and_writes_the_same_bytes(home: Path, tmp_path: Path) -> None:
    path = a_lock(tmp_path)
    lock = read_lock(path)
    assert lock_json(lock) == path.read_bytes()
    assert "builder" not in json.loads(path.read_bytes()), "a lock without a builder keeps the bytes of before"
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


def test_a_builder_section_reads_back_equal_and_lists_what_the_builder_stage_must_hold(
    home: Path, tmp_path: Path
) -> None:
    path = a_lock(tmp_path, builder=True)
    lock = read_lock(path)
    assert lock_json(lock) == path.read_bytes()
    assert lock.builder is not None
    assert sorted(json.loads(path.read_bytes())["builder"]) == ["debian", "python", "sources"]
    assert [deb.package for deb in lock.builder.debian] == ["bash", "cmake"], "sorted, as every section"
    assert isinstance(lock.builder.sources[0], LockedSource)
    # The builder stage is the base and what it installs: its bash upgrades the base's, tini is the image's.
    assert lock.builder_dpkg_list() == "bash=5.3\ncmake=3.25\n"
    assert lock.builder.python_list() == "nvcc==13.0\n"
    assert [name for name, _ in lock.files()][-4:] == [
        "bash_5.3_amd64.deb",
        "cmake_3.25_amd64.deb",
        "nvcc-13.0-py3-none-any.whl",
        "toy-src-1.0.tar.gz",
    ]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["builder"].pop("sources"), r"builder must have exactly the lists debian, python, sources"),
        (lambda d: d.update(builder=[]), r"builder must have exactly the lists debian, python, sources"),
        (lambda d: d["builder"]["debian"][0].update(origin="base"), r"builder.debian entry bash: origin must be image"),
        (
            lambda d: d["builder"]["sources"][0].update(sha256="x"),
            r"builder.sources\[0\] \(toy-src-1\.0\.tar\.gz\): sha256",
        ),
        (lambda d: d["builder"]["python"][0].pop("name"), r"builder.python\[0\] must have exactly the string fields"),
    ],
)
def test_a_malformed_builder_section_is_refused_naming_the_file_and_entry(
    home: Path, tmp_path: Path, edit, message
) -> None:  # type: ignore[no-untyped-def]
    path = a_lock(tmp_path, builder=True)
    payload = json.loads(path.read_text(encoding="utf-8"))
    edit(payload)
    path.write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(LockError, match=rf"{path}: {message}"):
        read_lock(path)


def test_every_committed_lock_is_canonical() -> None:
    """Reading and writing a committed lock gives its bytes: the builder section changed no lock made before it."""
    paths = [REPO / SIDECAR_LOCK, base_lock_path(REPO, "debian-bookworm"), *REPO.glob("frameworks/*/lock/*.json")]
    assert len(paths) >= 14
    for path in paths:
        assert lock_json(read_lock(path)) == path.read_bytes(), path


def test_a_missing_lock_names_the_command_that_makes_it(tmp_path: Path) -> None:
    with pytest.raises(LockError, match=r"no lock file \(make it with `learnerkit image lock`\)"):
        read_lock(tmp_path / "nope.json")


def test_the_cache_admits_a_file_only_under_its_locked_sha256(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "x.whl"
    other.write_bytes(b"not the locked bytes")
    with pytest.raises(LockError, match=r"x\.whl: sha256 [0-9a-f]{64} is not the locked " + "1" * 64):
        admit(other, "1" * 64)
    assert not any(cached_path("1" * 64).parent.glob("*1111*"))


def test_a_cached_file_changed_after_admission_fails_the_check_before_a_build(home: Path, tmp_path: Path) -> None:
    path = a_lock(tmp_path)
    lock = read_lock(path)
    files = {item.target: item for item in locked_context_files(lock)}
    assert ".locked/wheels/six-1.17.0-py2.py3-none-any.whl" in files and ".locked/debs/tini_0.19.0-1_amd64.deb" in files
    # Named by their locked sha256, so an image's inputs hash is known before the cache is filled.
    assert files[".locked/wheels/six-1.17.0-py2.py3-none-any.whl"].sha256 == lock.python[0].sha256
    check_cached(lock)
    present = inputs_hash("FROM scratch\n", list(files.values()), "sha256:base", BuildInputs())
    stored = cached_path(lock.python[0].sha256)
    stored.chmod(0o644)
    stored.write_bytes(b"a wheel, changed")
    with pytest.raises(
        LockError, match=r"toy: the lock cache's six-1\.17\.0-py2\.py3-none-any\.whl .* is not the locked"
    ):
        check_cached(lock)
    stored.unlink()
    assert inputs_hash("FROM scratch\n", list(files.values()), "sha256:base", BuildInputs()) == present
    with pytest.raises(LockError, match=r"toy: the lock cache lacks six-1\.17\.0-py2\.py3-none-any\.whl"):
        check_cached(lock)


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


BUILDER_TEMPLATE = """{% extends "learner_base/Dockerfile.j2" %}
{% block builder_stages %}
FROM {{ base_ref }} AS toy-builder
RUN apt-get update && apt-get install -y --no-install-recommends cmake
{% endblock %}
"""


def test_only_images_that_install_through_the_locked_steps_are_lockable(make_project: MakeProject) -> None:
    """The evaluator images are (their shared layer installs from the lock), and caffe (its builder stage from the
    lock's builder section); a template whose builder stage installs from a mirror is not, naming each stage that
    does: what the builder compiles reaches the image."""
    matrix = load_matrix(REPO)
    specs = ["mxnet:1.9.1-cpu", "robustness:1.20-cpu", "fairness:0.6-cpu", "caffe:1.0-cpu", "caffe:1.0-cuda"]
    kept, refused = lockable(matrix.select(specs))
    assert [image.name for image in kept] == specs and refused == []
    toy = load_matrix(make_project(template=BUILDER_TEMPLATE)).select(["toy:1.0-cpu"])
    kept, refused = lockable(toy)
    assert kept == [] and [r.name for r in refused] == ["toy:1.0-cpu"]
    assert refused[0].status == (
        "refused: toy:1.0-cpu: not lockable: its template installs outside the locked steps (stage toy-builder: "
        "apt-get from the mirrors), so what it builds would not follow from a lock"
    )


def test_caffe_installs_every_stage_from_its_lock_and_compiles_with_the_one_date() -> None:
    """The builder's .debs (checked against dpkg as the learner's are), the source by its sha256 and, for cuda, the
    toolkit's wheels come from `.locked-builder`; the learner stage never mounts it; the compile and the .pyc files
    of pycaffe take SOURCE_DATE_EPOCH."""
    for image in load_matrix(REPO).select(["caffe:1.0-cpu", "caffe:1.0-cuda"]):
        target = image_target(image, "example/base:1")
        assert target.builder == image.variant.builder and target.builder is not None
        assert "build-essential" in target.builder.apt and target.builder.sources == ["brocolli-caffe==9.0.2"]
        text = render_dockerfile(REPO, image, "example/base:1", BuildInputs(), locked=True)
        assert unlocked_installs(text) == []
        builder, learner = text[: text.rindex("\nFROM ")], text[text.rindex("\nFROM ") :]
        for step in (
            "RUN --mount=type=bind,source=.locked-builder/debs,target=/run/locked/debs",
            "--mount=type=bind,source=.locked-builder/dpkg.txt,target=/run/locked/dpkg.txt",
            "diff - /run/locked/dpkg.txt",
            "RUN --mount=type=bind,source=.locked-builder/sources,target=/run/locked/sources",
            "sha256sum --quiet --strict --check /run/locked/sources/SHA256SUMS",
            "tar -xzf /run/locked/sources/*.tar.gz -C /src/caffe",
            " && export SOURCE_DATE_EPOCH=1767225600",
        ):
            assert step in builder, (image.name, step)
        cuda = image.variant.accelerator == "cuda"
        assert ("python3 -m venv --without-pip /opt/cuda-toolkit" in builder) == cuda
        assert ("RUN --mount=type=bind,source=.locked-builder,target=/run/locked" in builder) == cuda
        assert ".locked-builder" not in learner and "RUN --mount=type=bind,source=.locked,target=/run/locked" in learner
        assert "SOURCE_DATE_EPOCH=1767225600 /opt/learner/venv/bin/python -m compileall -q /opt/caffe/python" in learner


def test_a_builder_its_template_never_installs_from_the_lock_is_refused(make_project: MakeProject) -> None:
    yaml_text = VALID_YAML.replace("        pip:\n", "        builder:\n          apt: [cmake]\n        pip:\n", 1)
    image = load_matrix(make_project(yaml_text)).select(["toy:1.0-cpu"])[0]
    with pytest.raises(LockError, match=r"toy:1\.0-cpu: framework.yaml's builder is set but its template's locked"):
        image_target(image, "example/base:1")


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


def test_the_builders_files_go_beside_the_images_and_the_sources_with_their_sums(home: Path, tmp_path: Path) -> None:
    """`.locked-builder/` is laid out as `.locked/` is (the same macros install from it), never inside it: the
    learner stage mounts `.locked` and must not be keyed by the builder's files."""
    lock = read_lock(a_lock(tmp_path, builder=True))
    assert lock.builder is not None
    targets = {item.target: item.source for item in locked_context_files(lock)}
    builder = {target for target in targets if target.startswith(".locked-builder/")}
    assert builder == {
        ".locked-builder/debs/bash_5.3_amd64.deb",
        ".locked-builder/debs/cmake_3.25_amd64.deb",
        ".locked-builder/wheels/nvcc-13.0-py3-none-any.whl",
        ".locked-builder/sources/toy-src-1.0.tar.gz",
        ".locked-builder/sources/SHA256SUMS",
        ".locked-builder/dpkg.txt",
        ".locked-builder/python.txt",
        ".locked-builder/requirements.txt",
    }
    text = {
        target: targets[target].read_text(encoding="utf-8")
        for target in builder
        if not target.endswith((".deb", ".whl", ".gz"))
    }
    source = lock.builder.sources[0]
    assert text[".locked-builder/sources/SHA256SUMS"] == f"{source.sha256}  /run/locked/sources/toy-src-1.0.tar.gz\n"
    assert text[".locked-builder/dpkg.txt"] == "bash=5.3\ncmake=3.25\n"
    assert text[".locked-builder/python.txt"] == "nvcc==13.0\n"
    assert text[".locked-builder/requirements.txt"].startswith("nvcc==13.0 --hash=sha256:")
    assert targets[".locked/dpkg.txt"].read_text(encoding="utf-8") == "bash=5.2\ntini=0.19.0-1\n"
    assert targets[".locked/python.txt"].read_text(encoding="utf-8") == "six==1.17.0\n"
    cached_path(source.sha256).chmod(0o644)
    cached_path(source.sha256).write_bytes(b"another source")
    with pytest.raises(LockError, match=r"toy: the lock cache's toy-src-1\.0\.tar\.gz .* is not the locked"):
        check_cached(lock)


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


def test_a_builder_locks_what_apt_adds_to_the_base_the_wheels_and_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """apt resolves in the base (its own packages come back as origin base: the lock's, not the builder's)."""
    asked: list[tuple[str, list[str]]] = []

    def resolve(base_ref: str, packages: list[str]) -> list[LockedDeb]:
        asked.append((base_ref, packages))
        return [
            LockedDeb("bash", "5.2", "amd64", "bash_5.2_amd64.deb", "1" * 64, "base"),
            LockedDeb("cmake", "3.25", "amd64", "cmake_3.25_amd64.deb", "2" * 64, "image"),
        ]

    nvcc = LockedWheel("nvcc", "13.0", "nvcc-13.0-py3-none-any.whl", "3" * 64)
    source = LockedSource("toy-src", "1.0", "toy-src-1.0.tar.gz", "4" * 64)
    monkeypatch.setattr(compute, "resolve_debs", resolve)
    monkeypatch.setattr(compute, "resolve_wheels", lambda requirements, python, inputs: [nvcc])
    monkeypatch.setattr(compute, "resolve_sources", lambda requirements, inputs: [source])
    spec = BuilderSpec(apt=["cmake", "build-essential", "cmake"], sources=["toy-src==1.0"], wheels=["nvcc==13.0"])
    builder = compute.compute_builder(spec, "example/base:1", "3.11", BuildInputs())
    assert asked == [("example/base:1", ["build-essential", "cmake"])]
    assert [deb.package for deb in builder.debian] == ["cmake"]
    assert builder.python == (nvcc,) and builder.sources == (source,)


def test_filling_the_cache_fetches_the_builders_files_once_each(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh machine fetches the builder's .debs, wheels and sources too; one the image locks as well (the CUDA
    runtime, a runtime library) is fetched once."""
    lock = read_lock(a_lock(tmp_path, builder=True))
    assert lock.builder is not None
    shared = lock.python[0]
    lock = make_lock(
        lock.image,
        list(lock.debian),
        list(lock.python),
        make_builder(list(lock.builder.debian), [*lock.builder.python, shared], list(lock.builder.sources)),
    )
    shutil.rmtree(home / "lock-cache")
    fetched: dict[str, list[str]] = {}

    def fetch(kind: str):  # type: ignore[no-untyped-def]
        def download(files, *_args) -> None:  # type: ignore[no-untyped-def]
            fetched[kind] = [f.filename for f in files]
            for f in files:
                (tmp_path / f.filename).write_bytes(f"the bytes of {f.filename}".encode())
                admit(tmp_path / f.filename, f.sha256)

        return download

    monkeypatch.setattr(compute, "download_debs", lambda base_ref, debs: fetch("debs")(debs))
    monkeypatch.setattr(compute, "download_wheels", fetch("wheels"))
    monkeypatch.setattr(compute, "download_sources", fetch("sources"))
    compute.fill_cache(lock, "example/base:1", BuildInputs())
    assert fetched == {
        "debs": ["tini_0.19.0-1_amd64.deb", "bash_5.3_amd64.deb", "cmake_3.25_amd64.deb"],
        "wheels": ["six-1.17.0-py2.py3-none-any.whl", "nvcc-13.0-py3-none-any.whl"],
        "sources": ["toy-src-1.0.tar.gz"],
    }
    assert missing(lock) == []


def test_a_source_distribution_is_locked_by_its_normalised_name_and_sha256(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def pip(args: list[str]) -> None:
        assert args[:3] == ["download", "--no-binary=:all:", "--no-deps"]
        dest = Path(args[args.index("--dest") + 1])
        dest.mkdir()
        (dest / "Brocolli_Caffe-9.0.2.tar.gz").write_bytes(b"the source")

    monkeypatch.setattr(lockpython, "_pip", pip)
    [source] = lockpython.resolve_sources(["brocolli-caffe==9.0.2"], BuildInputs())
    assert (source.name, source.version, source.filename) == ("brocolli-caffe", "9.0.2", "Brocolli_Caffe-9.0.2.tar.gz")
    assert cached_path(source.sha256).read_bytes() == b"the source"

    def wheel(args: list[str]) -> None:
        dest = Path(args[args.index("--dest") + 1])
        dest.mkdir()
        (dest / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"a wheel")

    monkeypatch.setattr(lockpython, "_pip", wheel)
    with pytest.raises(LockError, match=r"pip downloaded six-1\.17\.0-py2\.py3-none-any\.whl, which is not a source"):
        lockpython.resolve_sources(["six==1.17.0"], BuildInputs())
